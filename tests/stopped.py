"""A process stopped for a test (SIGSTOP), once it really is: the signal is sent at once,
but a thread of the process running on another processor runs on until the kernel takes
it off, and a test that counts what the process did meanwhile must not see it work."""
from __future__ import annotations

import os
import pathlib
import signal
import time


def _all_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T or t in its stat)."""
    for stat in pathlib.Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
        if state not in ("T", "t"):
            return False
    return True


def stop(pid: int, timeout: float = 60.0) -> None:
    """SIGSTOP ``pid`` and return once each of its threads is stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _all_stopped(pid):
        assert time.monotonic() < deadline, f"process {pid} was not stopped within {timeout} s"
        time.sleep(0.001)  # (a poll of what the kernel reports)
