"""VerbsRendezvous: the "grpc+verbs" protocol, served by the native core.

The core (``tensorverbs._core.Rendezvous``) holds this task's sends, its channels and the
recvs in flight; peers' requests are answered there without entering Python. Python
sets channels up over gRPC (:mod:`.channels`), starts recvs and turns their answers into
arrays: a recv calls into the core once and gets the result once (the blocking form
waits with the GIL released; the asynchronous form's future is settled by the core's
settler thread, or on the peer's lane when the tensor must be copied to its device). A
recv whose channel is not up yet first sets it up on the event loop.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import functools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import _core
from ..devices import HOST, Device
from ..errors import Code, TensorverbsError, UnavailableError, as_error, from_code
from ..rendezvous.future import RecvFuture, add_internal_callback
from ..rendezvous.key import RendezvousKey
from ..rendezvous.local import Value
from ..out import Out
from ..rendezvous.remote import PendingRecv, RecvCall, RemoteRendezvous, describe_recv, settle
from ..tensor import DT_STRING, DT_VARIANT, decode_proto, dtype_enum, encode_proto, mark_dead, numpy_dtype
from .channels import VerbsChannels
from .task_ids import TaskIds

if TYPE_CHECKING:
    from ..cluster import TaskName
    from ..runtime import TaskRuntime


atexit.register(_core.shutdown)  # the core's Python threads end before the interpreter


def _timeout(timeout: float | None) -> float:
    return -1.0 if timeout is None else max(0.0, float(timeout))


def _give_up_if_cancelled(handle: "_core.RecvHandle", fut: concurrent.futures.Future) -> None:
    if fut.cancelled():
        handle.give_up(int(Code.CANCELLED), "the recv was cancelled")


class _Connecting(PendingRecv):
    """A recv waiting for its channel to be set up, then for the core."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.task: concurrent.futures.Future | None = None
        self.handle: "_core.RecvHandle | None" = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.give_up(int(Code.CANCELLED), "the recv was cancelled")
        elif self.task is not None:
            self.task.cancel()

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        if self.handle is None:
            return UnavailableError(f"{call.what}: no verbs channel to {self.peer} within {timeout:g} s")
        return super().deadline_error(call, timeout)


class VerbsRendezvous(RemoteRendezvous):
    """Remote and local recvs through the native core; gRPC only sets channels up."""

    protocol = "grpc+verbs"

    def __init__(self, runtime: "TaskRuntime") -> None:
        super().__init__(runtime)
        self.ids = TaskIds(runtime.cluster.tasks(), runtime.spare_tasks)
        self._names = self.ids.names
        self.task_id = self.ids[runtime.task]
        self._joining = threading.Lock()
        self.core: _core.Rendezvous  # once started
        self.channels: VerbsChannels

    def start(self) -> None:
        cfg = self.rt.rdma_config
        self.core = _core.Rendezvous(
            self.task_id, self.ids.core_names, cfg.to_core(self.rt.bind_host), self.rt.host, cfg.rendezvous == "read",
            cfg.validate, cfg.message_slots, cfg.pool_block_bytes, cfg.pool_limit_bytes)
        self.channels = VerbsChannels(self.rt, self.core, self.ids)
        self.rt.counters.source(self.core.stats)

    def setup_handler(self):
        """GetRemoteAddress is answered by the channels' set-up."""
        return self.channels.handle_setup

    def add_task(self, task: "TaskName", address: str, replace: bool = False) -> None:
        """The cluster grows and ``task`` takes a free spare id of the core, the id of a
        task that joined and is gone if none is free (ResourceExhaustedError when there is
        none either)."""
        with self._joining:
            if task not in self.ids and not self.ids.spare:
                self._reclaim()
            self.ids.check_room(task)  # before the cluster grows
            super().add_task(task, address, replace)
            self.ids.add(task)
            self.channels.learned(task)

    def knows(self, task: "TaskName") -> bool:
        return super().knows(task) and not self.channels.unsure(task)

    def _reclaim(self) -> None:
        """Forget a task that joined at run time and is gone: its id is free again."""
        gone = next((t for t in self.rt.cluster.tasks() if self.ids.joined(t) and self.channels.gone(t)), None)
        if gone is not None:
            self.ids.release(gone)
            self.rt.cluster.remove_task(gone)
            self.channels.forget(gone)
            self.rt.loop.submit(self.rt.peers.forget(gone))

    def moved(self, task: "TaskName") -> None:
        """The channel to ``task``'s old address fails; the next recv sets one up at its new."""
        self.core.fail_channel(self.ids[task], int(Code.UNAVAILABLE), f"{task} moved")
        super().moved(task)

    # -- this task's tensors ----------------------------------------------------------------
    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None:
        array = value.array
        dtype: int = DT_STRING if array.dtype == object else dtype_enum(array.dtype)
        data = encode_proto(array) if dtype == DT_STRING else array
        self.core.send(step_id, self.ids[key.dst], key.name, dtype, array.shape, value.is_dead, data,
                       value.ticket)

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array in registered memory: sending it needs no registration or copy."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        memory: Any = self.core.allocate(nbytes)  # a ByteView, exporting its bytes
        return np.frombuffer(memory, np.uint8).view(dtype).reshape(shape)

    def pending(self) -> tuple[int, int]:
        return self.core.pending()

    def table_steps(self) -> int:
        return self.core.table_steps()

    # -- receiving ---------------------------------------------------------------------------
    def _direct(self, key: RendezvousKey) -> int | None:
        """The core's id of ``key.src`` when the core can serve the recv now."""
        src = self.ids[key.src]
        return src if src == self.task_id or self.core.ready(src) else None

    def recv(self, key: RendezvousKey, step_id: int, timeout: float | None,
             device: Device = HOST, out: Out | None = None) -> Any:
        src = self._direct(key)
        if src is None:
            return super().recv(key, step_id, timeout, device, out)
        started = time.monotonic()
        code, message, dtype, shape, is_dead, payload = self.core.recv(
            step_id, src, key.name, _timeout(timeout), out and out.destination)
        if code:
            raise from_code(code, self.ids.named(message))
        if out is not None:
            meta = self.rt.shared.meta(dtype, shape, payload)
            if not out.fits(*meta):
                self.core.give_back(step_id, src, key.name, dtype, shape, is_dead, payload)
                raise out.refusal(describe_recv(key, step_id), *meta)
        self._received(src, payload, started)
        return self._value(src, dtype, shape, is_dead, payload, device, out)

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None,
                   device: Device = HOST, out: Out | None = None) -> concurrent.futures.Future:
        src = self._direct(key)
        if src is None:
            return super().recv_async(key, step_id, timeout, device, out)
        fut = self.future(key)
        what = describe_recv(key, step_id) if out is not None else ""
        self._start(fut, src, key.name, step_id, _timeout(timeout), device, out, what, time.monotonic())
        return fut

    def _start(self, fut: concurrent.futures.Future, src: int, name: str, step_id: int,
               timeout: float, device: Device, out: Out | None, what: str, started: float) -> "_core.RecvHandle":
        """Start the core's recv settling ``fut``; cancelling ``fut`` gives it up."""
        handle = self.core.recv_async(step_id, src, name, timeout, fut,
                                      self._settler(device, src, started, out, what, step_id, name),
                                      out and out.destination)
        add_internal_callback(fut, functools.partial(_give_up_if_cancelled, handle))
        return handle

    def recv_from_remote(self, call: RecvCall) -> PendingRecv:
        op = _Connecting(str(call.key.src))
        op.task = self.rt.loop.submit(self._connect_then_start(call, op, time.monotonic()))
        return op

    async def _connect_then_start(self, call: RecvCall, op: _Connecting, began: float) -> None:
        try:
            await self.channels.connect(call.key.src)
        except Exception as exc:
            call.fail(as_error(exc, f"{call.what}: setting up the verbs channel"))
            return
        if op.cancelled or call.future.done():
            return
        timeout = call.timeout
        left = -1.0 if timeout is None else max(0.0, timeout - (time.monotonic() - began))
        # a cancel from now on gives the core's recv up (also one that came meanwhile)
        op.handle = self._start(call.future, self.ids[call.key.src], call.key.name, call.step_id,
                                left, call.device, call.out, call.what, call.started)

    def _settler(self, device: Device, src: int, started: float, out: Out | None, what: str,
                 step_id: int, name: str) -> Callable[..., bool]:
        """What settles the future of a recv of ``name`` from ``src`` at ``step_id``
        started at ``started`` (into ``out``, described by ``what``, if given)."""
        return functools.partial(self._settle, device, src, started, out, what, step_id, name)

    def _settle(self, device: Device, src: int, started: float, out: Out | None, what: str,
                step_id: int, name: str, fut: concurrent.futures.Future, code: int, message: str,
                dtype: int, shape: tuple, is_dead: bool, payload: Any) -> bool:
        """Settle ``fut`` with a recv's answer (in the core's settler thread); False if it
        was cancelled already or ``out`` refuses the tensor (which then goes back to the
        core for the next recv). A tensor for a device is handed to the peer's lane, which
        copies it there and settles ``fut``."""
        if fut.done():
            return False
        if code:
            return settle(fut, from_code(code, self.ids.named(message)))
        if not (out.device if out is not None else device).dma or dtype == DT_VARIANT:
            self.rt.lanes.run(self._names[src], self._settle_on_lane, device, src, started, out,
                              what, step_id, name, fut, dtype, shape, is_dead, payload)
            return True
        self._returnable(fut, step_id, src, name, dtype, shape, is_dead, payload, out)
        return self._settle_value(device, src, started, out, what, fut, dtype, shape, is_dead, payload)

    def _settle_on_lane(self, device: Device, src: int, started: float, out: Out | None, what: str,
                        step_id: int, name: str, fut: concurrent.futures.Future, dtype: int,
                        shape: tuple, is_dead: bool, payload: Any) -> None:
        """:meth:`_settle` of a tensor for a device, on its peer's lane; a tensor not taken
        goes back to the core."""
        self._returnable(fut, step_id, src, name, dtype, shape, is_dead, payload, out)
        if not self._settle_value(device, src, started, out, what, fut, dtype, shape, is_dead, payload):
            self.core.give_back(step_id, src, name, dtype, shape, is_dead, payload)

    def _returnable(self, fut: concurrent.futures.Future, step_id: int, src: int, name: str, dtype: int,
                    shape: tuple, is_dead: bool, payload: Any, out: Out | None) -> None:
        """Let ``fut``, about to be settled with this tensor, give it back to the core (a
        copy of ``out``'s landing, which holds it then, for a recv into ``out``); not one
        passed by handle."""
        if dtype != DT_VARIANT and isinstance(fut, RecvFuture):
            fut.returnable(functools.partial(self._give_back, step_id, src, name, dtype, shape, is_dead,
                                             payload if out is None else out.landing, out is not None))

    def _give_back(self, step_id: int, src: int, name: str, dtype: int, shape: tuple, is_dead: bool,
                   payload: Any, copy: bool) -> None:
        self.core.give_back(step_id, src, name, dtype, shape, is_dead, payload.copy() if copy else payload)

    def _settle_value(self, device: Device, src: int, started: float, out: Out | None, what: str,
                      fut: concurrent.futures.Future, dtype: int, shape: tuple, is_dead: bool,
                      payload: Any) -> bool:
        """Settle ``fut`` with a received tensor; False if it was cancelled already or
        ``out`` refuses the tensor. Whatever making the result raises settles ``fut``."""
        try:
            if fut.done():
                return False
            if out is not None:
                meta = self.rt.shared.meta(dtype, shape, payload)
                if not out.fits(*meta):
                    settle(fut, out.refusal(what, *meta))
                    return False
            self._received(src, payload, started)
            value = self._value(src, dtype, shape, is_dead, payload, device, out)
        except Exception as exc:
            settle(fut, as_error(exc, what or "receiving a tensor"))
            return True
        return settle(fut, None, value)

    def _received(self, src: int, payload: Any, started: float) -> None:
        """Observe a tensor from ``src`` delivered to its recv (the core counts it in
        stats() as it arrives; a local recv is neither counted nor observed)."""
        if src != self.task_id:
            self.rt.recvs.observe(self._names[src], memoryview(payload).nbytes, time.monotonic() - started)

    def _value(self, src: int, dtype: int, shape: tuple, is_dead: bool, payload: Any,
               device: Device, out: Out | None = None) -> Any:
        """The received tensor (from ``src``) as ``device`` holds it, or ``out`` holding it;
        a TensorverbsError if it cannot be made (e.g. no memory for the copy to the device)."""
        try:
            if dtype == DT_VARIANT:  # a tensor passed by handle
                return self.rt.shared.deliver(payload, self.rt.cluster.resolve(self._names[src]), device, out)
            return self._make_value(dtype, shape, is_dead, payload, device, out)
        except Exception as exc:
            raise as_error(exc, f"making the received tensor for {(out.device if out else device).name}") from exc

    def _make_value(self, dtype: int, shape: tuple, is_dead: bool, payload: Any,
                    device: Device, out: Out | None) -> Any:
        if dtype == DT_STRING:
            array = decode_proto(payload)
        elif isinstance(payload, np.ndarray):
            array = payload  # this task's own tensor, received locally
        else:
            array = np.frombuffer(payload, numpy_dtype(dtype)).reshape(shape)
        if out is not None:  # a tensor that fits: in out already, or copied there now
            if not out.device.dma:
                self.rt.counters.add("proxy_copies")
            return out.fill(array, is_dead)
        if device is not HOST:
            self.rt.counters.add("proxy_copies")
            return device.from_host(array)
        return mark_dead(array) if is_dead else array

    # -- steps and stopping --------------------------------------------------------------------
    def abort_step(self, step_id: int, error) -> None:
        super().abort_step(step_id, error)
        self.core.abort_step(step_id, int(error.code), error.message)

    def cleanup_step(self, step_id: int) -> None:
        super().cleanup_step(step_id)
        self.core.cleanup_step(step_id)

    def stop(self) -> None:
        super().stop()
        if hasattr(self, "core"):  # it started
            self.channels.close()
            self.core.stop()
