"""A local Ray cluster for the Ray integration's tests: small (2 CPUs, a 200 MB object
store, no dashboard), one per test module."""
from __future__ import annotations

import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).parent
#: how many times a Ray node is started before its start-up failure fails the module
STARTS = 2

# Ray runs its workers (the actors) at nice 15, where anything else busy on the machine
# starves them: beside the soft-RoCE lane (a qemu guest) a 64 MiB transfer between two
# actors outlasted Ray's 60 s wait for an object's tensors. The nodes the tests start
# (ray.init here, "ray start" in a network namespace) inherit this.
os.environ["RAY_worker_niceness"] = "0"
# Ray waits 30 s for its GCS server to write its port; beside the lane the GCS server of
# ray.init once took longer (Ray's own override of that wait, in seconds)
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray`` after ``ray.init()``; the actors import this directory's helpers by name."""
    ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for attempt in range(STARTS):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
            break
        except Exception as exc:
            # Ray gives its raylet a fixed 30 s to register; on a loaded 2-core machine (the
            # soft-RoCE lane beside the suite) it once took longer: start the node again
            ray.shutdown()
            slow = any(s in str(exc) for s in ("timed out during startup", "Timed out waiting"))
            if not slow or attempt == STARTS - 1:
                raise
    try:
        yield ray
    finally:
        ray.shutdown()
