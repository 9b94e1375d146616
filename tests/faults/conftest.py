"""The faults suite's fixtures: two hosts per variant, the same processes living through
every fault of the variant (:mod:`two_hosts`); each test heals the link when it ends,
whatever happened."""
from __future__ import annotations

from typing import Iterator

import pytest

from two_hosts import Hosts, two_hosts

#: the variants the suite runs over: one per protocol (grpc+verbs across the namespace
#: goes over the soft provider's TCP path, through the faults)
FAULT_VARIANTS = ("grpc", "verbs")


@pytest.fixture(scope="module", params=FAULT_VARIANTS)
def hosts(request) -> Iterator[Hosts]:
    with two_hosts(request.param) as hosts:
        yield hosts


@pytest.fixture
def hosts_healed(hosts: Hosts) -> Iterator[Hosts]:
    """The hosts, their link healed when the test ends."""
    try:
        yield hosts
    finally:
        hosts.faults.heal()
