"""The contenders of ``tensorverbs bench transfer``: a registry with availability checks.

A contender is a module of this package with ``available(**options)`` (whether it can run
here, and why not), ``link(**options)`` (what its two sides need to find each other,
made by the parent), a ``Sink`` and a ``Source`` class (``None`` for a limit measured in
one process). :meth:`Contender.start` puts each side in its own process. A contender
whose sink has ``start_one`` can also keep many transfers in flight at once.
"""
from __future__ import annotations

import importlib
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from ..peer import Peer, close_all
from .base import Sink as BaseSink

PACKAGE = __name__


@dataclass(frozen=True)
class Contender:
    """One way of moving a tensor (``kind="transport"``) or a limit to compare with."""

    name: str
    module: str
    kind: str         # "transport" or "limit"
    path: str         # "same-host", "tcp" or "in-process"
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def module_(self):
        """The contender's module."""
        return importlib.import_module(f"{PACKAGE}.{self.module}")

    def availability(self) -> tuple[bool, str]:
        """(whether it can run here, what it is or why it cannot)."""
        try:
            return self.module_.available(**self.options)
        except Exception as exc:  # a broken optional dependency makes it unavailable
            return False, f"{type(exc).__name__}: {exc}"

    @property
    def in_flight(self) -> bool:
        """Whether its sink can start transfers without waiting (:meth:`Pair.run` ``flight``)."""
        sink = self.module_.Sink
        return sink.start_one is not BaseSink.start_one

    def flies(self, call: str) -> bool:
        """Whether its sink can keep transfers in flight with ``call`` (one of
        :data:`~.base.FLIGHT_CALLS`)."""
        if call in ("recv_many", "recv_blocks"):
            method = "fetch_many" if call == "recv_many" else "fetch_blocks"
            return getattr(self.module_.Sink, method) is not getattr(BaseSink, method)
        return self.in_flight

    def peer(self, role: str, link: dict) -> Peer:
        """Start side ``role`` ("Source" or "Sink") in a process of its own (not waited for)."""
        return Peer(f"{self.name} {role.lower()}", f"{PACKAGE}.{self.module}:{role}", link,
                    env=self.env, wait=False, **self.options)

    def start(self) -> "Pair":
        """Start the two sides; :meth:`Pair.connect` waits for them."""
        module = self.module_
        link = module.link(**self.options)
        source = self.peer("Source", link) if module.Source is not None else None
        together = source is None or getattr(module, "START_TOGETHER", False)
        return Pair(self, source, self.peer("Sink", link) if together else None, link)


@dataclass
class Pair:
    """A contender's source and sink processes."""

    contender: Contender
    source: Peer | None
    sink: Peer | None
    link: dict

    def connect(self) -> None:
        """Wait until both sides are up (a sink that needs its source listening first is
        started here); on failure both are stopped."""
        try:
            if self.source is not None:
                self.source.ready()
            if self.sink is None:
                self.sink = self.contender.peer("Sink", self.link)
            self.sink.ready()
        except BaseException:
            self.close()
            raise

    @property
    def passive(self) -> bool:
        source = self.contender.module_.Source
        return source is None or source.passive

    def _signal(self, signum: int) -> None:
        if getattr(self.contender.module_, "SPINS_WHEN_IDLE", False):
            for peer in (self.source, self.sink):
                if peer is not None and peer.process.is_alive():
                    os.kill(peer.process.pid, signum)

    def pause(self) -> None:
        """Stop the processes of a contender that keeps the CPU busy while idle, so that it
        does not slow the others down; :meth:`resume` before its turn."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def can(self, call: str) -> bool:
        """Whether this pair times transfers asked for with ``call`` (see
        :data:`~.base.CALLS`): a future needs :meth:`Sink.start_one`, and a limit measured
        in one process has no calls."""
        if call == "recv_async().result()":
            return self.contender.in_flight
        return call == "recv" or self.contender.module_.Source is not None

    def run(self, nbytes: int, count: int, step: int, verify: bool = False,
            flight: bool = False, call: str = "recv") -> dict:
        """``count`` transfers of ``nbytes`` at steps ``step``.., timed in the sink: one at a
        time (asked for with ``call``), or with ``flight`` all started at once (with
        ``call`` of :data:`~.base.FLIGHT_CALLS`; one sample for them all).
        ``{"seconds": [...], "ok": bool | None, "cpu": the sink's CPU seconds,
        "sender_cpu": the source's CPU seconds (None without a source)}``."""
        method, extra = ("in_flight" if flight else "fetch"), (call,)
        source = self.source
        if source is None:
            return {**self.sink.call(method, nbytes, count, step, verify, None, *extra),
                    "sender_cpu": None}
        blocks = flight and call == "recv_blocks"
        offer = source.call("offer_blocks", nbytes, count) if blocks else source.call("offer", nbytes)
        before = source.call("cpu")
        # a passive source's tensors are offered before the sink asks, except in flight,
        # where the sends race the receives as they would in an application
        first = self.passive and not flight
        serve = "serve_blocks" if blocks else "serve"
        if first:
            source.call(serve, nbytes, count, step)
        else:
            source.post(serve, nbytes, count, step)
        out = self.sink.call(method, nbytes, count, step, verify, offer, *extra)
        if not first:
            source.result()
        return {**out, "sender_cpu": source.call("cpu") - before}

    def close(self) -> None:
        self.resume()
        close_all([p for p in (self.source, self.sink) if p is not None])
        self.source = self.sink = None


#: every contender, in the order of the report
CONTENDERS: list[Contender] = [
    Contender("grpc+verbs", "protocols", "transport", "same-host",
              {"protocol": "grpc+verbs", "provider": "soft"},
              {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "auto"}),
    Contender("grpc+verbs tcp", "protocols", "transport", "tcp",
              {"protocol": "grpc+verbs", "provider": "soft"},
              {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "no"}),
    Contender("grpc+verbs ibverbs", "protocols", "transport", "ibverbs",
              {"protocol": "grpc+verbs", "provider": "ibverbs"}, {"TENSORVERBS_PROVIDER": "ibverbs"}),
    Contender("grpc+verbs by handle", "by_handle", "transport", "same-host",
              {"protocol": "grpc+verbs", "provider": "soft"},
              {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "auto"}),
    Contender("grpc+verbs read", "one_sided", "transport", "same-host",
              {"protocol": "grpc+verbs", "provider": "soft"},
              {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "auto"}),
    Contender("grpc+verbs read tcp", "one_sided", "transport", "tcp",
              {"protocol": "grpc+verbs", "provider": "soft"},
              {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "no"}),
    Contender("grpc+verbs read ibverbs", "one_sided", "transport", "ibverbs",
              {"protocol": "grpc+verbs", "provider": "ibverbs"}, {"TENSORVERBS_PROVIDER": "ibverbs"}),
    Contender("grpc", "protocols", "transport", "tcp", {"protocol": "grpc"}),
    Contender("tensorpipe", "tensorpipe", "transport", "same-host", env={"TP_SOCKET_IFNAME": "lo"}),
    Contender("gloo", "gloo", "transport", "tcp", env={"GLOO_SOCKET_IFNAME": "lo"}),
    Contender("nixl", "nixl", "transport", "same-host", env={"NIXL_LOG_LEVEL": "WARN"}),
    Contender("memcpy", "memcpy", "limit", "in-process"),
    Contender("raw unix", "sockets", "limit", "same-host", {"family": "unix"}),
    Contender("raw tcp", "sockets", "limit", "tcp", {"family": "tcp"}),
]


def by_name(names: list[str] | None = None) -> list[Contender]:
    """The contenders called ``names`` (all when None); ValueError for an unknown name."""
    if names is None:
        return list(CONTENDERS)
    known = {c.name: c for c in CONTENDERS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown contender(s) {', '.join(unknown)}: expected "
                         + ", ".join(known))
    return [known[n] for n in names]
