"""Run in a task's process (``TaskProcess.call("run", "delivered:send")``): a send that
returns once its receiver has the tensor."""
from __future__ import annotations

from typing import Any


def send(server: Any, name: str, value: Any, to: str, step_id: int, timeout: float) -> None:
    """Send ``value`` as ``name`` to ``to`` at ``step_id``; return when ``to`` has it."""
    server.send(name, value, to, step_id).wait(timeout)
