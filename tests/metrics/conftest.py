"""The metrics suite: a two-task cluster per protocol whose tasks serve /metrics on the
port TENSORVERBS_METRICS_PORT asks for."""
from __future__ import annotations

import pytest
from metered import Metered
from variants import VARIANTS, start_pair


@pytest.fixture(scope="module", params=["grpc", "verbs"])
def variant(request) -> str:
    """Both protocols: "grpc", and "grpc+verbs" on the soft provider."""
    return request.param


@pytest.fixture(scope="module")
def metered(variant):
    protocol, env = VARIANTS[variant]
    env = {**env, "TENSORVERBS_METRICS_PORT": "0"}  # the ps child reads it from its environment
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORVERBS_METRICS_PORT", "0")  # and the in-process worker from this one
        pair = start_pair(protocol, env)
    try:
        yield Metered(pair)
    finally:
        pair.worker.stop()
        pair.ps.stop()
