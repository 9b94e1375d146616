"""A two-task cluster serving metrics, and reading them the way Prometheus does: over
HTTP, parsed by prometheus-client's parser."""
from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from variants import Pair

#: a sample's name and labels -> its value
Samples = dict[tuple[str, frozenset], float]


def scrape(address: str) -> Samples:
    """Every sample that ``http://address/metrics`` serves."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with exactly ``labels`` (0 if it is not there yet,
    as a Prometheus counter that has not been touched)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


@dataclass
class Metered:
    """The pair's tasks and their metrics endpoints."""

    pair: Pair

    @property
    def protocol(self) -> str:
        return self.pair.protocol

    def address(self, task: str) -> str:
        if task == Pair.WORKER:
            return self.pair.worker.metrics_address
        return self.pair.ps.call("run", "builtins:getattr", "metrics_address")

    def stats(self, task: str) -> dict[str, int]:
        return self.pair.worker.stats() if task == Pair.WORKER else self.pair.ps.stats()

    def settled(self, task: str, timeout: float = 30.0) -> tuple[dict[str, int], Samples]:
        """stats() and a scrape of ``task`` taken while nothing changed (a message still
        being handled, such as a release, changes counters after a recv returned)."""
        address, deadline = self.address(task), time.monotonic() + timeout
        while True:
            before, samples, after = self.stats(task), scrape(address), self.stats(task)
            if before == after:
                return after, samples
            assert time.monotonic() < deadline, f"the stats of {task} kept changing for {timeout} s"
