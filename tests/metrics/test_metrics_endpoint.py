"""/metrics of a live cluster: stats() as counters and gauges, per-peer recv counts and
the recv-duration histogram, the port from the environment or the constructor."""
from __future__ import annotations

import socket
import urllib.error
import urllib.request

import numpy as np
import pytest
from metered import scrape, value
from variants import Pair

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec, pattern, same

PS, WORKER = Pair.PS, Pair.WORKER
#: one tensor per size class but the largest: (bytes, its size class)
TENSORS = [(100, "<=4KiB"), (4096, "<=4KiB"), (40_000, "<=64KiB"), (300_000, "<=1MiB"),
           (3 << 20, "<=16MiB")]
#: the stats() entries that are levels, and their gauges
GAUGES = {"ipc_exports": "tensorverbs_ipc_exports", "table_steps": "tensorverbs_table_steps",
          "pool_in_use_bytes": "tensorverbs_pool_in_use_bytes",
          "registered_bytes": "tensorverbs_pool_registered_bytes",
          "message_buffer_bytes": "tensorverbs_message_buffer_bytes",
          "registered_buffers": "tensorverbs_registered_buffers",
          "remote_accesses_in_flight": "tensorverbs_remote_accesses_in_flight",
          "setups_awaiting_join": "tensorverbs_setups_awaiting_join",
          "recv_calls_waiting": "tensorverbs_recv_calls_waiting",
          "tensors_unconfirmed": "tensorverbs_tensors_unconfirmed",
          "channel_setups": "tensorverbs_channel_setups", "links_live": "tensorverbs_links_live"}


def _exchange(metered, step: int) -> None:
    """The ps sends TENSORS to the worker, the worker one tensor back; every byte checked."""
    pair = metered.pair
    for i, (nbytes, _) in enumerate(TENSORS):
        pair.ps.send_pattern(f"t{i}", WORKER, step, nbytes, i)
    for i, (nbytes, _) in enumerate(TENSORS[:-1]):
        assert same(pair.worker.recv(f"t{i}", PS, step, timeout=60), pattern(nbytes, i))
    last = len(TENSORS) - 1  # the asynchronous form counts too
    received = pair.worker.recv_async(f"t{last}", PS, step, timeout=60).result(timeout=60)
    assert same(received, pattern(TENSORS[last][0], last))
    pair.worker.send("back", pattern(1000, 99), PS, step)
    assert pair.ps.recv_pattern("back", WORKER, step, 1000, 99, timeout=60)


def test_scraped_counters_equal_stats(metered, step):
    protocol = metered.protocol
    worker_stats_before, _ = metered.settled(WORKER)
    _exchange(metered, step)
    for task in (WORKER, PS):
        stats, samples = metered.settled(task)
        labels = {"task": task, "protocol": protocol}
        for stat, count in stats.items():
            name = GAUGES.get(stat, f"tensorverbs_{stat}_total")
            assert (name, frozenset(labels.items())) in samples, name
            assert value(samples, name, **labels) == count, stat
    # the counters count what moved
    stats, _ = metered.settled(WORKER)
    received = sum(nbytes for nbytes, _ in TENSORS)
    assert stats["tensors_received"] - worker_stats_before["tensors_received"] == len(TENSORS)
    assert stats["bytes_received"] - worker_stats_before["bytes_received"] == received


def test_recvs_are_counted_per_peer_and_timed_by_size(metered, step):
    protocol = metered.protocol
    _, before = metered.settled(WORKER)
    _, ps_before = metered.settled(PS)
    _exchange(metered, step)
    stats, after = metered.settled(WORKER)
    from_ps = {"task": WORKER, "peer": PS, "protocol": protocol}

    def delta(name: str, samples=after, earlier=before, **labels: str) -> float:
        return value(samples, name, **labels) - value(earlier, name, **labels)

    assert delta("tensorverbs_peer_bytes_received_total", **from_ps) == sum(n for n, _ in TENSORS)
    counts = {size: delta("tensorverbs_recv_duration_seconds_count", **from_ps, size=size)
              for size in ("<=4KiB", "<=64KiB", "<=1MiB", "<=16MiB", ">16MiB")}
    assert counts == {"<=4KiB": 2, "<=64KiB": 1, "<=1MiB": 1, "<=16MiB": 1, ">16MiB": 0}
    assert sum(counts.values()) == len(TENSORS)  # one observation per recv
    for size, count in counts.items():
        assert delta("tensorverbs_recv_duration_seconds_bucket", **from_ps, size=size, le="+Inf") == count
    assert delta("tensorverbs_recv_duration_seconds_sum", **from_ps, size="<=16MiB") > 0
    # a task's peers add up to its stats()
    for name, stat in [("tensorverbs_recv_duration_seconds_count", "tensors_received"),
                       ("tensorverbs_peer_bytes_received_total", "bytes_received")]:
        assert sum(v for (n, _), v in after.items() if n == name) == stats[stat]
    # and the ps received one small tensor from the worker
    _, ps_after = metered.settled(PS)
    from_worker = {"task": PS, "peer": WORKER, "protocol": protocol}
    assert delta("tensorverbs_recv_duration_seconds_count", ps_after, ps_before,
                 **from_worker, size="<=4KiB") == 1
    assert delta("tensorverbs_peer_bytes_received_total", ps_after, ps_before, **from_worker) == 1000


def _refused(address: str) -> bool:
    try:
        urllib.request.urlopen(f"http://{address}/metrics", timeout=10).close()
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_metrics_port_argument_serves_until_stop(protocol, monkeypatch, step):
    monkeypatch.setenv("TENSORVERBS_PROVIDER", "soft")
    monkeypatch.delenv("TENSORVERBS_METRICS_PORT", raising=False)
    cluster = cluster_spec({"worker": 1})
    with tv.Server(cluster, "worker", 0, protocol) as quiet:
        assert quiet.metrics_address is None
    server = tv.Server(cluster, "worker", 0, protocol, metrics_port=0)
    try:
        address = server.metrics_address
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        server.send("x", np.arange(10, dtype=np.int64), to=WORKER, step_id=step)
        np.testing.assert_array_equal(server.recv("x", WORKER, step, timeout=30), np.arange(10))
        samples = scrape(address)
        labels = {"task": WORKER, "protocol": protocol}
        assert value(samples, "tensorverbs_sends_total", **labels) == 1
        assert value(samples, "tensorverbs_local_recvs_total", **labels) == 1
        # a local recv moves nothing between tasks
        assert value(samples, "tensorverbs_tensors_received_total", **labels) == 0
        assert not any(name.startswith(("tensorverbs_peer_", "tensorverbs_recv_duration"))
                       for name, _ in samples)
    finally:
        server.stop()
    assert _refused(address)


def test_metrics_port_taken_fails_the_server_cleanly(monkeypatch):
    monkeypatch.delenv("TENSORVERBS_METRICS_PORT", raising=False)
    cluster = cluster_spec({"worker": 1})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(tv.UnavailableError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            tv.Server(cluster, "worker", 0, metrics_port=port)
    with tv.Server(cluster, "worker", 0) as again:  # the failed server let its gRPC port go
        assert again.metrics_address is None


@pytest.mark.parametrize("port", ["http", "-1", "65536"])
def test_a_bad_metrics_port_variable_is_named(monkeypatch, port):
    monkeypatch.setenv("TENSORVERBS_METRICS_PORT", port)
    with pytest.raises(tv.InvalidArgumentError, match=f"TENSORVERBS_METRICS_PORT='{port}'"):
        tv.Server(cluster_spec({"worker": 1}), "worker", 0)


def test_levels_are_gauges_and_counts_counters(step):
    """A level that goes up and down (ipc_exports: copies not released yet) is a gauge."""
    from prometheus_client.parser import text_string_to_metric_families

    with tv.Server(cluster_spec({"ps": 1}), "ps", 0, metrics_port=0) as server:
        with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=30) as response:
            types = {f.name: f.type for f in text_string_to_metric_families(response.read().decode())}
        assert types["tensorverbs_ipc_exports"] == "gauge"
        assert types["tensorverbs_table_steps"] == "gauge"
        assert types["tensorverbs_tensors_sent"] == "counter"
