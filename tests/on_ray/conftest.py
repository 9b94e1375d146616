"""A local Ray cluster for the Ray integration's tests: small (2 CPUs, a 200 MB object
store, no dashboard), one per test module."""
from __future__ import annotations

import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray`` after ``ray.init()``; the actors import this directory's helpers by name."""
    ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield ray
    finally:
        ray.shutdown()
