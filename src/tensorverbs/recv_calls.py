"""The Server's recv calls: one tensor by key, blocking, as a future, or awaited in
asyncio (:class:`RecvCalls`, which :class:`tensorverbs.Server` is), and how a recv's
result is made and where it lands."""
from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any, cast

from . import arguments as check
from .devices import HOST, Device, get_device
from .errors import InvalidArgumentError, public
from .out import Out
from .rendezvous.future import RecvFuture
from .rendezvous.key import RendezvousKey, TaskKeys
from .results import ResultFuture, Results

if TYPE_CHECKING:
    from .rendezvous.remote import RemoteRendezvous
    from .runtime import TaskRuntime


class RecvCalls:
    """The public recv calls of a Server (its protocol's rendezvous does the work)."""

    _rendezvous: "RemoteRendezvous"
    _rt: "TaskRuntime"
    _keys: TaskKeys
    tensor_type: str

    def _check_running(self) -> None:
        raise NotImplementedError

    @public
    def recv_async(self, name: str, source: str, step_id: int = 0,
                   timeout: float | None = None, device: str | None = None,
                   out: Any = None, *, dtype: Any = None,
                   tensor_type: str | None = None) -> concurrent.futures.Future[Any]:
        """Start receiving tensor ``name`` sent by ``source`` to this task at ``step_id``.

        The future yields a numpy array or a torch tensor sharing the received memory
        (``tensor_type``: the server's unless given, "torch" with a torch ``dtype``), or a
        tensor on ``device`` ("cuda:0", or the "cpu:proxy" stand-in) copied there from a
        host proxy buffer. ``dtype`` (numpy's or torch's) casts the tensor on receipt, in
        one pass. A tensor of a dtype torch lacks (strings) fails a torch recv with
        InvalidArgumentError and is kept for the next recv of it. The future can be
        awaited in asyncio (``await fut``); cancelling the awaiting task cancels the recv. A dead tensor (sent
        with ``is_dead=True``) yields a :class:`tensorverbs.DeadTensor`: test it with
        :func:`tensorverbs.is_dead`. The future raises DeadlineExceededError after
        ``timeout`` seconds, AbortedError when the step is aborted, UnavailableError when
        ``source`` cannot be reached or dies.

        With ``out`` (a numpy array, torch tensor or any tensor speaking DLPack, C-contiguous
        and writable, on the host or a device) the tensor is written into ``out`` in place
        and the future yields ``out`` itself (``dtype`` is not taken then). A tensor of
        another dtype or shape than ``out`` raises InvalidArgumentError and is kept for the
        next recv of it. If the recv fails, ``out`` may have been written in part.
        """
        results = self._results(out, dtype, tensor_type)
        key = self._recv_key(name, source)
        step_id, timeout = check.integer(step_id, "step_id"), check.optional_seconds(timeout, "timeout")
        fut: concurrent.futures.Future[Any]
        if (relay := self._rt.relays.following(key, step_id)) is not None:  # asked again
            fut = self._rendezvous.follow(relay, key, step_id, timeout, *self._into(device, out))
        else:
            fut = self._rendezvous.recv_async(key, step_id, timeout, *self._into(device, out))
        return fut if results is None else ResultFuture(fut, results, self._rt.lanes, str(key.src))

    @public
    def recv(self, name: str, source: str, step_id: int = 0, timeout: float | None = None,
             device: str | None = None, out: Any = None, *, dtype: Any = None,
             tensor_type: str | None = None) -> Any:
        """Receive tensor ``name`` from ``source`` (blocking); see :meth:`recv_async`."""
        if self._results(out, dtype, tensor_type) is None:
            key, step_id = self._recv_key(name, source), check.integer(step_id, "step_id")
            timeout, into = check.optional_seconds(timeout, "timeout"), self._into(device, out)
            relay = self._rt.relays.following(key, step_id)
            if relay is None:
                return self._rendezvous.recv(key, step_id, timeout, *into)
            fut: concurrent.futures.Future[Any] = self._rendezvous.follow(relay, key, step_id, timeout, *into)
        else:
            fut = self.recv_async(name, source, step_id, timeout, device, out, dtype=dtype, tensor_type=tensor_type)
        try:
            return fut.result()
        except BaseException:  # a signal handler's exception gives the recv up, its tensor kept
            if not fut.cancel():
                assert isinstance(fut, RecvFuture)
                fut.give_back()
            raise

    @public
    async def arecv(self, name: str, source: str, step_id: int = 0, timeout: float | None = None,
                    device: str | None = None, out: Any = None, *, dtype: Any = None,
                    tensor_type: str | None = None) -> Any:
        """Receive tensor ``name`` from ``source`` in asyncio, without blocking the event
        loop; see :meth:`recv_async`. Cancelling the awaiting task gives the recv up: the
        tensor (even one that arrived just then) is kept for the next recv of it."""
        fut = cast(RecvFuture, self.recv_async(name, source, step_id, timeout, device, out, dtype=dtype,
                                               tensor_type=tensor_type))
        try:
            return await fut
        except BaseException:  # cancelled (or interrupted): the tensor is kept
            if not fut.cancel():
                fut.give_back()
            raise

    def _results(self, out: Any, dtype: Any, tensor_type: str | None) -> Results | None:
        """How a recv's result is made (None: the received array as it is)."""
        if dtype is None and tensor_type is None and (out is not None or self.tensor_type == "numpy"):
            return None
        results = Results(check.optional_text(tensor_type, "tensor_type"), dtype, self.tensor_type)
        if out is not None:
            if results.casts:
                raise InvalidArgumentError("dtype= is not taken with out=: the tensor must have out's dtype")
            return None
        return None if results.identity else results

    def _into(self, device: str | None, out: Any) -> tuple[Device, Out | None]:
        """(the device a recv delivers to, its ``out``); ``out`` lands on the host and is
        copied to its device by :class:`Out`. The host learns that this task sees the
        device."""
        if out is None and device is None:  # (most recvs: the host, which needs no note)
            return HOST, None
        if out is not None:
            into = Out(out, device)
            self._rt.shared.note(into.device)
            return HOST, into
        target = get_device(device)
        self._rt.shared.note(target)
        return target, None

    def _recv_key(self, name: str, source: str) -> RendezvousKey:
        """The key of a recv of ``name`` from ``source`` here (a local recv is counted)."""
        self._check_running()
        key, local = self._keys.recv(name, source)
        if local:
            self._rt.counters.add("local_recvs")
        return key
