"""A Prometheus collector that reads a server's ``stats()`` when it is scraped."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: the stats() entries that are levels, not counts -> their gauges' names
GAUGES = {
    "ipc_exports": "tensorverbs_ipc_exports",
    "table_steps": "tensorverbs_table_steps",
    "pool_in_use_bytes": "tensorverbs_pool_in_use_bytes",
    "registered_bytes": "tensorverbs_pool_registered_bytes",
    "message_buffer_bytes": "tensorverbs_message_buffer_bytes",
    "registered_buffers": "tensorverbs_registered_buffers",
    "remote_accesses_in_flight": "tensorverbs_remote_accesses_in_flight",
    "setups_awaiting_join": "tensorverbs_setups_awaiting_join",
    "channel_setups": "tensorverbs_channel_setups",
    "recv_calls_waiting": "tensorverbs_recv_calls_waiting",
    "tensors_unconfirmed": "tensorverbs_tensors_unconfirmed",
    "links_live": "tensorverbs_links_live",
}


class StatsCollector(Collector):
    """Every entry of ``stats()`` at scrape time, labelled by task and protocol: a counter
    as ``tensorverbs_<name>_total``, a level as its gauge of :data:`GAUGES`."""

    def __init__(self, stats: Callable[[], Mapping[str, int]], task: str, protocol: str) -> None:
        self._stats = stats
        self._labels = [task, protocol]

    def collect(self) -> Iterator[Metric]:
        for stat, value in sorted(self._stats().items()):
            help_text = f"Server.stats()[{stat!r}]"
            family = (GaugeMetricFamily(GAUGES[stat], help_text, labels=("task", "protocol"))
                      if stat in GAUGES else
                      CounterMetricFamily(f"tensorverbs_{stat}", help_text, labels=("task", "protocol")))
            family.add_metric(self._labels, value)
            yield family
