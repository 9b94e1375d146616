"""Run in a task's process (``TaskProcess.run("serving:...")``): faults of its serving."""
from __future__ import annotations

import tensorverbs as tv


def stop_serving(server: tv.Server) -> None:
    """Stop the task's gRPC server (its port closes) and leave the rest running: its verbs
    channels stay up, as a process's do for the moment it takes to end."""
    running = server._running
    server._rt.loop.submit(running.grpc.stop(grace=None)).result()
