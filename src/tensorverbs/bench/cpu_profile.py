"""``tensorverbs bench transfer --profile``: where the CPU of a 4 KiB recv goes.

While a contender's pair moves 4 KiB tensors in a tight loop (``recv(..., timeout=)``),
``perf record`` samples each of its two processes (every thread, with call graphs); the
report gives, per side, the share of the samples by thread (the core's threads are named
"tv-...") and library, and the hottest symbols.
Needs ``perf`` (Debian: ``apt install linux-perf``) and ``kernel.perf_event_paranoid``
that lets this user sample its own processes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Callable

from .contenders import Pair

#: samples a second per thread
FREQUENCY = 2999


def unavailable() -> str | None:
    """Why perf cannot profile here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: apt install linux-perf)"
    with tempfile.TemporaryDirectory(prefix="tv-perf-") as tmp:
        tried = subprocess.run(["perf", "record", "-q", "-g", "-o", os.path.join(tmp, "d"), "--", "true"],
                               capture_output=True, text=True, check=False)
    if tried.returncode != 0:
        return f"perf cannot sample here: {tried.stderr.strip()[:200]}"
    return None


def _report(data: str, sort: str, limit: float) -> str:
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                          "--sort", sort, "--percent-limit", f"{limit:g}"],
                         capture_output=True, text=True, check=False)
    return "\n".join(line.rstrip() for line in out.stdout.splitlines()
                     if line.strip() and not line.startswith("#") and line.strip(" -"))


def profile(pair: Pair, seconds: float, loop: Callable[[], None]) -> dict[str, dict[str, str]]:
    """Sample the sender's and the receiver's process for ``seconds`` while ``loop`` runs
    rounds of transfers (it is called until the sampling ends); for each side its report
    by thread and library, and by symbol."""
    sides = {"sender": pair.source, "receiver": pair.sink}
    with tempfile.TemporaryDirectory(prefix="tv-profile-") as tmp:
        perfs = {side: (data := os.path.join(tmp, f"{side}.data"), subprocess.Popen(
            ["perf", "record", "-q", "-F", str(FREQUENCY), "-g", "-o", data,
             "-p", str(peer.process.pid), "--", "sleep", f"{seconds:g}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            for side, peer in sides.items() if peer is not None}
        while any(p.poll() is None for _, p in perfs.values()):
            loop()
        reports = {}
        for side, (data, perf) in perfs.items():
            _, err = perf.communicate()
            if perf.returncode != 0 or not os.path.exists(data):
                raise RuntimeError(f"perf record of the {side} failed (exit {perf.returncode}): "
                                   f"{err.strip()}")
            reports[side] = {"by_thread": _report(data, "comm,dso", 1.0),
                             "by_symbol": _report(data, "comm,dso,symbol", 0.7)}
        return reports
