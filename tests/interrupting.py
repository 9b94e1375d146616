"""Run in a task's process (``TaskProcess.call("run", "interrupting:...")``): a blocking
recv that a signal interrupts."""
from __future__ import annotations

import signal
import time


class Signalled(Exception):
    """What the SIGUSR1 handler of :func:`interrupted_recv` raises."""


def _raise(signum, frame) -> None:
    raise Signalled(f"signal {signum}")


def interrupted_recv(server, name: str, source: str, step_id: int, timeout: float) -> tuple[str, float] | None:
    """Block in ``server.recv`` until a signal's handler raises (SIGINT: KeyboardInterrupt,
    SIGUSR1: Signalled); returns (the exception's class name, the monotonic time it reached
    this frame), or None if the recv returned or failed otherwise."""
    signal.signal(signal.SIGUSR1, _raise)
    try:
        server.recv(name, source, step_id, timeout)
    except (KeyboardInterrupt, Signalled) as exc:
        return type(exc).__name__, time.monotonic()
    except Exception:
        return None
    return None
