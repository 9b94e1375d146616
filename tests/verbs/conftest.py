"""Fixtures of the verbs tests: the provider flavors and connected pairs."""
from __future__ import annotations

import pytest

from verbs_pair import FLAVORS, open_pair, unavailable


@pytest.fixture(params=FLAVORS)
def flavor(request) -> str:
    reason = unavailable(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


@pytest.fixture
def qp_pair(flavor):
    """Two connected sides (A, B) of ``flavor``, queue depths 64."""
    a, b = open_pair(flavor)
    yield a, b
    a.close()
    b.close()
