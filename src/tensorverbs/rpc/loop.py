"""The asyncio event loop thread that runs a task's gRPC server and client calls."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")


def shared_task(coro: Coroutine[Any, Any, T]) -> "asyncio.Task[T]":
    """A task for ``coro`` that several callers await, each through ``asyncio.shield``:
    its outcome is retrieved even when every caller gave up first (asyncio would log
    "Task exception was never retrieved")."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


class EventLoopThread:
    """An asyncio loop in a daemon thread; other threads hand it coroutines and callbacks."""

    def __init__(self, name: str = "tensorverbs-grpc") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:  # the worker threads of run_in_executor end with the loop
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; cancelling the returned future cancels the coroutine."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon (from any thread)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Stop the loop and (unless called from it) wait for its thread to end."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

