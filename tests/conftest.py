"""Shared fixtures: protocol variants and a two-task cluster (a child-process ps and an
in-process worker) per variant."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings

from variants import VARIANTS, pair_of

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
    yield from pair_of(variant)


@pytest.fixture(params=list(VARIANTS))
def fresh_pair(request):
    """A pair of its own for one test (one whose peers stop or fail), on each variant."""
    yield from pair_of(request.param)
