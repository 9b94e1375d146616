"""``tensorverbs top``: a live table of tasks' ``/metrics`` endpoints, one row per task
and one per peer it receives from."""
from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.filesize import decimal
from rich.live import Live
from rich.table import Table

from ..errors import InvalidArgumentError
from .scrape import ALL_PEERS, Reading, metrics_url, read

COLUMNS = ("task", "peer", "state", "recv/s", "recv B/s", "sent/s", "sent B/s",
           "tensors recv", "bytes recv", "tensors sent", "bytes sent", "pool in use / registered")
#: the counted fields, in the order of their columns, and how their rates print
FIELDS = (("tensors_received", "{:.1f}"), ("bytes_received", "bytes"),
         ("tensors_sent", "{:.1f}"), ("bytes_sent", "bytes"))


def read_all(endpoints: Sequence[str], timeout: float) -> list[Reading]:
    """One reading of each endpoint, scraped together."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(endpoints), 16)) as pool:
        return list(pool.map(lambda endpoint: read(endpoint, timeout), endpoints))


def _rate(field: str, style: str, now: dict[str, float], before: dict[str, float] | None,
          seconds: float) -> str:
    if field not in now:
        return ""
    if before is None or field not in before or seconds <= 0:
        return "-"
    delta = now[field] - before[field]
    rate = (delta if delta >= 0 else now[field]) / seconds  # a restarted task counts from 0
    return decimal(int(rate)) + "/s" if style == "bytes" else style.format(rate)


def _total(values: dict[str, float], field: str) -> str:
    return str(int(values[field])) if field in values else ""


def _pool(values: dict[str, float]) -> str:
    if "pool_in_use" not in values:
        return "-"  # a protocol without a registered pool
    return f"{decimal(int(values['pool_in_use']))} / {decimal(int(values.get('pool_registered', 0)))}"


def _row_order(item: tuple[tuple[str, str], dict[str, float]]) -> tuple[str, bool, str]:
    (task, peer), _ = item
    return task, peer != ALL_PEERS, peer  # a task's own row, then its peers'


def table(readings: Sequence[Reading], previous: Sequence[Reading | None] = ()) -> Table:
    """The table of ``readings``, with rates since ``previous`` (the readings before them,
    endpoint by endpoint; "-" where there is none)."""
    out = Table(*COLUMNS, box=box.SQUARE)
    for now, before in itertools.zip_longest(readings, previous):
        if now.error is not None:
            out.add_row(now.endpoint, "", f"down: {now.error}")
            continue
        usable = before if before is not None and before.error is None else None
        seconds = now.time - usable.time if usable is not None else 0.0
        for (task, peer), values in sorted(now.rows.items(), key=_row_order):
            earlier = usable.rows.get((task, peer)) if usable is not None else None
            own = peer == ALL_PEERS
            out.add_row(task, peer, f"up {now.protocols.get(task, '')}".rstrip() if own else "",
                        *(_rate(field, style, values, earlier, seconds) for field, style in FIELDS),
                        *(_total(values, field) for field, _ in FIELDS), _pool(values) if own else "")
    return out


def _print(console: Console, rendered: Table) -> None:
    if not console.is_terminal:  # a file or a pipe: as wide as the table, never wrapped
        unbounded = console.options.update(max_width=1 << 16)
        console.width = max(console.width, console.measure(rendered, options=unbounded).maximum)
    console.print(rendered)


def main(endpoints: Sequence[str], interval: float = 2.0, once: bool = False,
         timeout: float = 2.0) -> int:
    """Show the table of ``endpoints`` (``HOST:PORT`` or URLs), refreshed every
    ``interval`` seconds until interrupted; ``once``: print it once, its rates taken over
    one interval. Returns 1 if an endpoint was down in the last table, else 0."""
    if interval < 0 or timeout <= 0:
        raise InvalidArgumentError(
            f"top: interval {interval:g} s, timeout {timeout:g} s: expected interval >= 0 and timeout > 0")
    for endpoint in endpoints:
        metrics_url(endpoint)  # refuses one that is not HOST:PORT or a URL, before any scrape
    console = Console()
    previous = read_all(endpoints, timeout)
    if once:
        time.sleep(interval)
        readings = read_all(endpoints, timeout)
        _print(console, table(readings, previous))
        return int(any(r.error is not None for r in readings))
    readings = previous
    try:
        with Live(table(readings), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                previous, readings = readings, read_all(endpoints, timeout)
                live.update(table(readings, previous), refresh=True)
    except KeyboardInterrupt:
        pass
    return int(any(r.error is not None for r in readings))
