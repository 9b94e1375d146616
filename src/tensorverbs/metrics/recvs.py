"""What a task's remote recvs observe as each completes: the bytes from each peer, and the
recv's duration by size class (whose count is the tensors from each peer).

A recv adds to plain counts under one lock (about a microsecond); Prometheus reads them
when it scrapes (:meth:`RecvMetrics.collect`), so no metric object is touched per tensor.
"""
from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

#: upper bounds (bytes) of the size classes of the duration histogram ...
SIZE_BOUNDS = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
#: ... and their labels, one more for the tensors above the last bound
SIZE_CLASSES = ("<=4KiB", "<=64KiB", "<=1MiB", "<=16MiB", ">16MiB")
#: histogram buckets (seconds): from a small tensor on one host to a very large one
DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _Observed:
    """The observations of one (peer, size class): bytes, seconds, and per bucket
    (the last: above every bound) the recvs whose duration fell there."""

    __slots__ = ("bytes", "seconds", "buckets")

    def __init__(self) -> None:
        self.bytes = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)


class RecvMetrics(Collector):
    """The recv metrics of one task in ``registry``, labelled by task, peer and protocol:
    ``tensorverbs_peer_bytes_received_total`` and ``tensorverbs_recv_duration_seconds``
    (also by ``size``, the tensor's size class; its ``_count`` counts the tensors).
    """

    def __init__(self, registry: CollectorRegistry, task: str, protocol: str) -> None:
        self._task, self._protocol = task, protocol
        self._lock = threading.Lock()
        self._observed: dict[tuple[str, int], _Observed] = {}
        registry.register(self)

    def observe(self, peer: str, nbytes: int, seconds: float) -> None:
        """Count a tensor of ``nbytes`` received from ``peer`` by a recv that took ``seconds``."""
        bucket = bisect.bisect_left(DURATION_BUCKETS, seconds)
        with self._lock:
            self._add(peer, nbytes, seconds, bucket)

    def observe_all(self, tensors: Iterable[tuple[str, int]], seconds: float) -> None:
        """Count each of ``tensors`` (peer, nbytes), received by recvs that took ``seconds``
        (a batch's), under the lock once."""
        bucket = bisect.bisect_left(DURATION_BUCKETS, seconds)
        with self._lock:
            for peer, nbytes in tensors:
                self._add(peer, nbytes, seconds, bucket)

    def observe_batch(self, peer: str, nbytes: int, count: int, seconds: float) -> None:
        """Count ``count`` tensors of ``nbytes`` each received from ``peer`` by a batch of
        recvs that took ``seconds``."""
        bucket = bisect.bisect_left(DURATION_BUCKETS, seconds)
        with self._lock:
            self._add(peer, nbytes, seconds, bucket, count)

    def _add(self, peer: str, nbytes: int, seconds: float, bucket: int, count: int = 1) -> None:
        at = (peer, bisect.bisect_left(SIZE_BOUNDS, nbytes))
        observed = self._observed.get(at)
        if observed is None:
            observed = self._observed[at] = _Observed()
        observed.bytes += nbytes * count
        observed.seconds += seconds * count
        observed.buckets[bucket] += count

    def collect(self) -> Iterator[Metric]:
        received = CounterMetricFamily("tensorverbs_peer_bytes_received", "Bytes received from each peer",
                                       labels=("task", "peer", "protocol"))
        durations = HistogramMetricFamily(
            "tensorverbs_recv_duration_seconds",
            "Seconds from a recv's start to its tensor's arrival (waiting for the send included)",
            labels=("task", "peer", "protocol", "size"))
        with self._lock:
            observed = {at: (o.bytes, o.seconds, list(o.buckets)) for at, o in self._observed.items()}
        per_peer: dict[str, int] = {}
        for (peer, size), (nbytes, seconds, buckets) in sorted(observed.items()):
            per_peer[peer] = per_peer.get(peer, 0) + nbytes
            cumulative, total = [], 0
            for bound, count in zip((*map(str, DURATION_BUCKETS), "+Inf"), buckets):
                total += count
                cumulative.append((bound, total))
            durations.add_metric([self._task, peer, self._protocol, SIZE_CLASSES[size]], cumulative, seconds)
        for peer, nbytes in per_peer.items():
            received.add_metric([self._task, peer, self._protocol], nbytes)
        yield received
        yield durations
