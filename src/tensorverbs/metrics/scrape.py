"""Reading a task's ``/metrics`` endpoint into the numbers ``tensorverbs top`` shows."""
from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from ..errors import InvalidArgumentError

#: sample name -> the field it fills in a task's own row
TASK_FIELDS = {
    "tensorverbs_tensors_received_total": "tensors_received",
    "tensorverbs_bytes_received_total": "bytes_received",
    "tensorverbs_tensors_sent_total": "tensors_sent",
    "tensorverbs_bytes_sent_total": "bytes_sent",
    "tensorverbs_pool_in_use_bytes": "pool_in_use",
    "tensorverbs_pool_registered_bytes": "pool_registered",
}
#: sample name -> the field it adds to in a row of one of the task's peers (the histogram
#: has one count per size class)
PEER_FIELDS = {
    "tensorverbs_recv_duration_seconds_count": "tensors_received",
    "tensorverbs_peer_bytes_received_total": "bytes_received",
}
#: the peer of a task's own row
ALL_PEERS = "all"


@dataclass
class Reading:
    """One scrape of ``endpoint``: (task, peer or :data:`ALL_PEERS`) -> field -> value, or
    why it failed."""

    endpoint: str
    time: float
    rows: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    protocols: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def metrics_url(endpoint: str) -> str:
    """``http://HOST:PORT/metrics`` from ``HOST:PORT``; an http(s) URL is taken as it is.
    InvalidArgumentError for anything else (a metrics endpoint has no default port)."""
    url = endpoint if "://" in endpoint else f"http://{endpoint}/metrics"
    parts = urllib.parse.urlsplit(url)
    port = parts.netloc.rpartition(":")[2] if ":" in parts.netloc.rpartition("]")[2] else ""
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(f"{endpoint!r}: expected HOST:PORT or an http:// URL")
    if "://" not in endpoint and not port:
        raise InvalidArgumentError(f"{endpoint!r} has no port: expected HOST:PORT (the task's metrics port)")
    if port and not (port.isdigit() and int(port) <= 65535):
        raise InvalidArgumentError(f"{endpoint!r}: the port {port!r} is not a number in 0-65535")
    return url


def read(endpoint: str, timeout: float) -> Reading:
    """Scrape ``endpoint``; a failure is the reading's ``error``, never an exception."""
    reading = Reading(endpoint, time.monotonic())
    try:
        with urllib.request.urlopen(metrics_url(endpoint), timeout=timeout) as response:
            text = response.read().decode("utf-8")
        families = list(text_string_to_metric_families(text))
    except urllib.error.URLError as exc:  # HTTPError included
        reading.error = str(exc.reason)
        return reading
    except (OSError, ValueError) as exc:  # a timeout, a reset, not the text format
        reading.error = str(exc) or type(exc).__name__
        return reading
    for family in families:
        for sample in family.samples:
            labels = sample.labels
            if sample.name in TASK_FIELDS:
                row, name = (labels.get("task", "?"), ALL_PEERS), TASK_FIELDS[sample.name]
                reading.protocols[row[0]] = labels.get("protocol", "?")
            elif sample.name in PEER_FIELDS:
                row, name = (labels.get("task", "?"), labels.get("peer", "?")), PEER_FIELDS[sample.name]
            else:
                continue
            values = reading.rows.setdefault(row, {})
            values[name] = values.get(name, 0.0) + sample.value
    if not reading.rows:
        reading.error = "no tensorverbs metrics"
    return reading
