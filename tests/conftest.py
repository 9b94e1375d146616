"""Shared fixtures: protocol variants and a two-task cluster (a child-process ps and an
in-process worker) per variant."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings

from variants import VARIANTS, start_pair

# the machines that run the tests are small and busy: never fail a property test on speed
settings.register_profile("tensorverbs", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tensorverbs")

_steps = itertools.count(1000)


@pytest.fixture
def step() -> int:
    """A step id no other test uses."""
    return next(_steps)


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def pair(variant):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    yield p
    p.worker.stop()
    p.ps.stop()
