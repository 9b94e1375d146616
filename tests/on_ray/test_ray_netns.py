"""Two Ray nodes, the second in a network namespace (another "host"): run_cluster spreads
the tasks over both, and an actor's tensor crosses to an actor on the other node."""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
pytest.importorskip("torch", reason="the Ray integration moves torch tensors")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from tensorverbs.netns import namespace, unavailable_reason  # noqa: E402
from tensorverbs.ray import run_cluster  # noqa: E402
from test_ray_transport import BIG, Actor  # noqa: E402
from test_run_cluster import parameter_server_step  # noqa: E402

pytestmark = pytest.mark.netns
_REASON = unavailable_reason()
HERE = pathlib.Path(__file__).parent
#: how long the second node may take to join (seconds)
JOIN_TIMEOUT = 120


def _wait_for_nodes(count: int) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT
    while len([n for n in ray.nodes() if n["Alive"]]) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} Ray nodes were alive after {JOIN_TIMEOUT} s")
        time.sleep(0.2)  # a condition, polled


@pytest.fixture(scope="module")
def two_nodes():
    """(head node id, namespaced node id) of a Ray cluster whose second node runs in a
    network namespace."""
    if _REASON is not None:
        pytest.skip(_REASON)
    # a temp dir of their own: "ray start" records the cluster there, where no later
    # ray.init() of this machine finds it
    with namespace() as ns, tempfile.TemporaryDirectory(prefix="tvray") as temp:
        path = os.pathsep.join([str(HERE), str(HERE.parent)])
        ray.init(address="local", _node_ip_address=ns.host_ip, _temp_dir=temp, num_cpus=2,
                 include_dashboard=False, object_store_memory=200 * 2**20,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        node = None
        try:
            gcs = ray.get_runtime_context().gcs_address
            ray_cli = pathlib.Path(sys.executable).with_name("ray")
            node = subprocess.Popen(
                ["ip", "netns", "exec", ns.name, str(ray_cli), "start", "--block", f"--address={gcs}",
                 f"--node-ip-address={ns.inner_ip}", f"--temp-dir={temp}", "--num-cpus=2",
                 "--object-store-memory=200000000", "--disable-usage-stats"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            _wait_for_nodes(2)
            ids = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
            yield ids[ns.host_ip], ids[ns.inner_ip]
        finally:  # the second node first: without the head it waits for it to come back
            if node is not None:
                os.killpg(node.pid, signal.SIGTERM)
                node.wait(60)
            ray.shutdown()


def test_run_cluster_spreads_over_both_nodes(two_nodes):
    def where_and_step(server):
        return server.cluster.address(server.task).rsplit(":", 1)[0], parameter_server_step(server)

    # Ray's SPREAD is a best effort (a busy machine saw all three actors on one node); each
    # actor holding one of a node's two CPUs makes three of them need both nodes
    results = run_cluster(where_and_step, {"ps": 1, "worker": 2}, "grpc+verbs", timeout=300,
                          actor_options={"num_cpus": 1})
    assert all(ok for _, ok in results.values())
    assert len({host for host, _ in results.values()}) == 2


def test_a_tensor_crosses_to_the_other_node(two_nodes):
    from tensorverbs.ray import register_transport

    name = register_transport("TENSORVERBS_NETNS")
    source, destination = (Actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                           for node in two_nodes)
    tensors = source.make.options(tensor_transport=name).remote(seed=11)
    assert ray.get(destination.check.remote(tensors, 11), timeout=240)
    assert ray.get(destination.bytes_received.remote(name)) >= BIG
