"""What a task's remote recvs observe as each completes: the bytes from each peer, and the
recv's duration by size class (whose count is the tensors from each peer)."""
from __future__ import annotations

import bisect

from prometheus_client import CollectorRegistry, Counter, Histogram

#: upper bounds (bytes) of the size classes of the duration histogram ...
SIZE_BOUNDS = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
#: ... and their labels, one more for the tensors above the last bound
SIZE_CLASSES = ("<=4KiB", "<=64KiB", "<=1MiB", "<=16MiB", ">16MiB")
#: histogram buckets (seconds): from a small tensor on one host to a very large one
DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RecvMetrics:
    """The recv metrics of one task in ``registry``, labelled by task, peer and protocol:
    ``tensorverbs_peer_bytes_received_total`` and ``tensorverbs_recv_duration_seconds``
    (also by ``size``, the tensor's size class; its ``_count`` counts the tensors).
    """

    def __init__(self, registry: CollectorRegistry, task: str, protocol: str) -> None:
        labels = ("task", "peer", "protocol")
        self._bytes = Counter("tensorverbs_peer_bytes_received", "Bytes received from each peer",
                              labels, registry=registry)
        self._seconds = Histogram(
            "tensorverbs_recv_duration_seconds",
            "Seconds from a recv's start to its tensor's arrival (waiting for the send included)",
            (*labels, "size"), buckets=DURATION_BUCKETS, registry=registry)
        self._task, self._protocol = task, protocol
        # (peer, size class) -> the metrics' children for it, bound once (no label lookups
        # on the data path)
        self._children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe(self, peer: str, nbytes: int, seconds: float) -> None:
        """Count a tensor of ``nbytes`` received from ``peer`` by a recv that took ``seconds``."""
        size = bisect.bisect_left(SIZE_BOUNDS, nbytes)
        children = self._children.get((peer, size))
        if children is None:  # two threads may bind the same children: labels() gives both the same
            labels = (self._task, peer, self._protocol)
            children = self._children[(peer, size)] = (
                self._bytes.labels(*labels), self._seconds.labels(*labels, SIZE_CLASSES[size]))
        received, seconds_histogram = children
        received.inc(nbytes)
        seconds_histogram.observe(seconds)
