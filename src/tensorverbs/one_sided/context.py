"""The verbs context of a task's one-sided access: opened on first use with the task's
verbs settings (its own device context, apart from the protocol's channels), with one
protection domain for the buffers it registers and the queue pairs that reach them."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .. import _core

if TYPE_CHECKING:
    from ..verbs.config import RdmaConfig

#: completions a queue pair of one-sided access may have outstanding
QUEUE_DEPTH = 64


class VerbsContext:
    """The context, protection domain and provider name, opened by :meth:`open`."""

    def __init__(self, config: "RdmaConfig", listen_host: str, bind_host: str) -> None:
        self._config, self._listen_host, self._bind_host = config, listen_host, bind_host
        self._lock = threading.Lock()
        self.context: _core.Context | None = None
        self.pd: _core.ProtectionDomain
        self.provider = ""

    def open(self) -> "VerbsContext":
        """Itself, opened (at the first call; the provider's errors as TensorverbsErrors)."""
        with self._lock:
            if self.context is None:
                context = _core.open_context(listen_host=self._listen_host,
                                             config=self._config.to_core(self._bind_host))
                self.pd = context.alloc_pd()
                self.provider = context.device["provider"]
                self.context = context
        return self

    def queue_pair(self, send_wr: int) -> tuple[_core.QueuePair, _core.CompletionQueue]:
        """A new queue pair with a completion queue of its own."""
        assert self.context is not None
        cq = self.context.create_cq(QUEUE_DEPTH)
        return self.context.create_qp(self.pd, cq, cq, send_wr, 1), cq
