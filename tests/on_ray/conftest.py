"""A local Ray cluster for the Ray integration's tests: small (2 CPUs, a 200 MB object
store, no dashboard), one per test module."""
from __future__ import annotations

import os
import pathlib
import time
from typing import Any, Callable

import pytest

HERE = pathlib.Path(__file__).parent

# Ray runs its workers (the actors) at nice 15, where anything else busy on the machine
# starves them: beside the soft-RoCE lane (a qemu guest) a 64 MiB transfer between two
# actors outlasted Ray's 60 s wait for an object's tensors. The nodes the tests start
# (ray.init here, "ray start" in a network namespace) inherit this.
os.environ["RAY_worker_niceness"] = "0"
# Ray waits 30 s for its GCS server to write its port; beside the lane the GCS server of
# ray.init once took longer (Ray's own override of that wait, in seconds)
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")


#: how long the fixture lets a Ray node's raylet take to register with its GCS server
REGISTER_S = 180.0


def _patient(get_node: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    """``get_node`` asked again until the node registered or REGISTER_S passed: Ray gives
    the raylet of ``ray.init`` a fixed 30 s, which a loaded 2-core machine (the soft-RoCE
    lane's guest booting beside the suite) outlasted twice in a row."""
    def ask(gcs_address: str, node_id: str) -> Any:
        deadline = time.monotonic() + REGISTER_S
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return ask


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray`` after ``ray.init()``; the actors import this directory's helpers by name."""
    ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
    import ray._private.services as services

    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "get_node", _patient(services.get_node))
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield ray
    finally:
        ray.shutdown()
