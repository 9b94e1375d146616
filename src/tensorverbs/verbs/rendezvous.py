"""VerbsRendezvous: the "grpc+verbs" protocol, served by the native core.

The core (``tensorverbs._core.Rendezvous``) holds this task's sends, its channels and the
recvs in flight; peers' requests are answered there without entering Python. Python
sets channels up over gRPC (:mod:`.channels`), starts recvs and turns their answers into
arrays: a recv calls into the core once and gets the result once (the blocking form
waits with the GIL released; the asynchronous form's answer is kept in the core until its
future is looked at, or settled by the core's settler thread once something waits on the
future, or on the peer's lane when the tensor must be copied to its device). A recv whose
channel is not up yet first sets it up on the event loop.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import dataclasses
import functools
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import _core
from ..devices import HOST, Device
from ..errors import Code, DeadlineExceededError, TensorverbsError, UnavailableError, as_error, from_code
from ..in_hand import IN_HAND, give_back
from ..out import Out
from ..rendezvous.key import RendezvousKey
from ..rendezvous.future import RecvFuture, giving_up, started
from ..rendezvous.local import Value
from ..rendezvous.recv_call import PendingRecv, RecvCall, describe_recv, settle
from ..rendezvous.relay_plan import Relayed
from ..rendezvous.remote import ProtocolOptions, RemoteRendezvous, raise_failed_sends
from ..rpc.peers import HELD_SECONDS
from ..runtime import host_of
from ..tensor import dtype_enum
from .answers import answer_array, plain_array, wire
from .blocks import VerbsBlocks, _timeout
from .channels import VerbsChannels
from .task_ids import TaskIds
from .unmatched import UnmatchedRecvs, Watcher

if TYPE_CHECKING:
    from ..cluster import TaskName
    from ..runtime import TaskRuntime


atexit.register(_core.shutdown)  # the core's Python threads end before the interpreter

#: an answer of recv_many in hand whose relay descriptor the relay took: an interrupted call
#: gives the core nothing back for it (see :mod:`tensorverbs.in_hand`)
_RELAYED = (int(Code.CANCELLED), "", 0, (), False, None)


class _Connecting(PendingRecv):
    """A recv waiting for its channel to be set up, then for the core."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.task: concurrent.futures.Future | None = None
        self.core: _core.RecvHandle | None = None  # (its cancel gives the core's recv up)
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.core is not None:
            self.core.cancel()
        elif self.task is not None:
            self.task.cancel()

    def peer_answered(self) -> bool:
        return self.core is not None

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        if self.core is None:
            return DeadlineExceededError(f"{call.what} timed out after {timeout:g} s: no verbs channel to "
                                         f"{self.peer} (it has not answered yet)")
        return super().deadline_error(call, timeout)


class VerbsRendezvous(VerbsBlocks, RemoteRendezvous):
    """Remote and local recvs through the native core; gRPC only sets channels up."""

    protocol = "grpc+verbs"

    def __init__(self, runtime: "TaskRuntime", options: ProtocolOptions) -> None:
        super().__init__(runtime, options)
        self.ids = TaskIds(runtime.cluster.tasks(), options.spare_tasks)
        self.task_id = self.ids[runtime.task]
        self._joining = threading.Lock()
        self.core: _core.Rendezvous  # once started
        self.channels: VerbsChannels
        self._settle_core = self._settle  # bound once: the core calls it for every recv_async
        self._settle_parked_core = self._settle_parked  # and this for every parked one

    def start(self) -> None:
        cfg, bind = self.options.rdma_config, self.options.bind
        self.core = _core.Rendezvous(
            self.task_id, self.ids.core_names, cfg.to_core(host_of(bind) if bind else ""), self.rt.host,
            cfg.rendezvous == "read",
            cfg.validate, cfg.message_slots, cfg.pool_block_bytes, cfg.pool_limit_bytes, recover=True,
            hold_seconds=cfg.hold_seconds)
        self.channels = VerbsChannels(self.rt, self.core, self.ids)
        self.unmatched = UnmatchedRecvs(self.core, self.ids, self.task_id)
        self._core_give_back = self.core.give_back  # bound once: futures keep it
        self.rt.counters.source(self.core.stats)
        self.rt.counters.gauge("setups_awaiting_join", lambda: self.ids.waiting)
        self.rt.counters.gauge("channel_setups", self.channels.setting_up)

    def watch(self, step_id: int, name: str, watcher: Watcher) -> None:
        self.unmatched.watch(step_id, name, watcher)

    def unwatch(self, step_id: int, name: str) -> None:
        self.unmatched.unwatch(step_id, name)

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
        self.channels.fail_moved(task, f"{task} moved")
        self.rt.loop.submit(self.channels.moved(task))  # before any set-up asked for later

    # -- this task's tensors ----------------------------------------------------------------
    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None:
        dtype, data = wire(value.array)
        self.core.send(step_id, self.ids[key.dst], key.name, dtype, value.array.shape, value.is_dead, data,
                       value.ticket)

    def send_many(self, offers: Sequence[tuple[int, RendezvousKey, Value]]) -> tuple[int, TensorverbsError] | None:
        """The offers in one call to the core, the GIL released once."""
        ids: dict["TaskName", int] = {}
        steps, dsts, names, dtypes, shapes, deads, datas, tickets = ([] for _ in range(8))
        for step, key, value in offers:
            dst = ids.get(key.dst)
            if dst is None:
                try:
                    dst = ids[key.dst] = self.ids[key.dst]
                except TensorverbsError:  # a receiver left: the offers before it go, its error names it
                    return super().send_many(offers)
            array = value.array
            dtype, data = wire(array)
            steps.append(step)
            dsts.append(dst)
            names.append(key.name)
            dtypes.append(dtype)
            shapes.append(array.shape)
            deads.append(value.is_dead)
            datas.append(data)
            tickets.append(value.ticket)
        at, code, message = self.core.send_many(steps, dsts, names, dtypes, shapes, deads, datas, tickets)
        return None if at < 0 else (at, from_code(code, self.ids.named(message)))

    def broadcast(self, step_id: int, keys: Sequence[RendezvousKey], value: Value,
                  tickets: Sequence[Any]) -> None:
        """Offer ``value`` to each receiver of ``keys``, its bytes registered once for all."""
        array = value.array
        if array.dtype == object:  # strings: a TensorProto each
            return super().broadcast(step_id, keys, value, tickets)
        try:
            dsts = [self.ids[key.dst] for key in keys]
        except TensorverbsError as exc:  # a receiver left: nothing was sent
            for ticket in tickets:
                ticket.fail(int(exc.code), exc.message)
            raise
        sent = self.core.broadcast(step_id, dsts, keys[0].name, dtype_enum(array.dtype), array.shape,
                                   value.is_dead, array, list(tickets))
        failed = [(key, code, message) for key, (code, message) in zip(keys, sent) if code]
        for ticket, (code, message) in zip(tickets, sent):
            if code:
                ticket.fail(code, message)
        raise_failed_sends(failed)

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
        # the core puts its answer in hand before it returns it (as a signal's handler may run)
        answer = self.core.recv(step_id, src, key.name, _timeout(timeout), out and out.destination, IN_HAND)
        code, message, dtype, shape, is_dead, payload = answer
        if code == Code.DEADLINE_EXCEEDED and src != self.task_id:  # saying what the peer holds
            try:
                said = self.rt.loop.submit(self.held(key, step_id)).result(2 * HELD_SECONDS)
            except (concurrent.futures.TimeoutError, RuntimeError):  # (RuntimeError: the loop stopped)
                said = ""
            raise DeadlineExceededError(self.ids.named(message) + said)
        if code:
            raise from_code(code, self.ids.named(message))
        if out is None and device is HOST and src != self.task_id:
            array = plain_array(dtype, shape, is_dead, payload)
            if array is not None:  # a peer's numeric tensor: the result as it is (as recv_many makes it)
                self.rt.recvs.observe(str(key.src), array.nbytes, time.monotonic() - started)
                return array
        value = Value(answer_array(dtype, shape, payload), is_dead)
        refusal = self.delivery.refusal(out, describe_recv(key, step_id), value) if out is not None else None
        if refusal is not None:
            give_back()
            raise refusal
        if src != self.task_id:
            self.delivery.observe(key.src, memoryview(payload).nbytes, started)
        result = self.delivery.result(value, key.src, device, out)
        if type(result) is not Relayed:
            return result
        IN_HAND.held = None  # (the relay's descriptor is the relay's now: not given back to the core)
        fut = self.follow(result, key, step_id, None if timeout is None else
                          max(0.0, timeout - (time.monotonic() - started)), device, out)
        try:
            return fut.result()
        except BaseException:  # a signal's exception: its tensor is kept for the next recv of it
            fut.cancel()
            raise

    def recv_many(self, keys: Sequence[RendezvousKey], steps: Sequence[int], timeout: float | None
                  ) -> list[Any] | None:
        """The core's recvs of every key at once, waited for with the GIL released once;
        None unless every channel is up already."""
        ready: dict["TaskName", int | None] = {}
        srcs = []
        for key in keys:
            src = ready[key.src] if key.src in ready else ready.setdefault(key.src, self._direct(key))
            if src is None:
                return None
            srcs.append(src)
        started = time.monotonic()
        names = [key.name for key in keys]
        answers = self.core.recv_many(steps, srcs, names, _timeout(timeout), IN_HAND)  # (in hand, as recv)
        peers = {src: str(task) for task, src in ready.items() if src is not None}
        relayed: dict[int, RecvFuture] = {}
        results = giving_up(lambda: self._results(keys, steps, srcs, answers, peers, started, timeout, relayed))
        for i, fut in relayed.items():  # (interrupted, the public call gives every one back)
            error = fut.exception()
            results[i] = fut.result() if error is None else error
        return results

    def _results(self, keys: Sequence[RendezvousKey], steps: Sequence[int], srcs: list[int], answers: list,
                 peers: dict[int, str], started: float, timeout: float | None,
                 relayed: dict[int, RecvFuture]) -> list[Any]:
        """The result of each of :meth:`recv_many`'s ``answers``, but those that follow a
        relay (their futures in ``relayed``, each settled by the time this returns)."""
        seconds = time.monotonic() - started
        results: list[Any] = []
        arrived: list[tuple[str, int]] = []
        for i, (key, step, src, answer) in enumerate(zip(keys, steps, srcs, answers)):
            code, _, dtype, shape, is_dead, payload = answer
            array = None if code or src == self.task_id else plain_array(dtype, shape, is_dead, payload)
            if array is None:
                result = self._answer(key, step, src, answer, started)
                if type(result) is Relayed:  # fetched from the relay's parent, all at once below
                    answers[i] = _RELAYED  # (the relay's descriptor now: not given back to the core)
                    left = None if timeout is None else max(0.0, timeout - seconds)
                    relayed[len(results)] = self.follow(result, key, step, left)
                results.append(result)
                continue
            results.append(array)  # as _answer makes it, without its calls
            arrived.append((peers[src], array.nbytes))
        self.rt.recvs.observe_all(arrived, seconds)
        for fut in relayed.values():
            fut.exception()  # waits (on the main thread in slices: signal handlers run)
        return results

    def _answer(self, key: RendezvousKey, step_id: int, src: int, answer: tuple, started: float) -> Any:
        """The array (or the TensorverbsError) of one of :meth:`recv_many`'s answers."""
        code, message, dtype, shape, is_dead, payload = answer
        if code:
            return from_code(code, self.ids.named(message))
        try:
            value = Value(answer_array(dtype, shape, payload), is_dead)
            if src != self.task_id:
                self.delivery.observe(key.src, memoryview(payload).nbytes, started)
            return self.delivery.result(value, key.src, HOST, None)
        except Exception as exc:  # a malformed TensorProto; no memory for a descriptor's copy
            return as_error(exc, f"{describe_recv(key, step_id)}: receiving the tensor")

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None,
                   device: Device = HOST, out: Out | None = None, *, own: bool = False) -> concurrent.futures.Future:
        src = self._direct(key)
        if src is None:
            return super().recv_async(key, step_id, timeout, device, out, own=own)
        fut = self.future(key)
        call = RecvCall(key, step_id, device, timeout, fut, out=out)
        try:
            if not own:
                started(fut)
            self._start(call, src, _timeout(timeout))
        except BaseException:  # a signal's exception as it started: the core gives its tensor back
            self.give_up(fut)
            self._give_back_early(call, fut)
            raise
        return fut

    def _give_back_early(self, call: RecvCall, fut: RecvFuture) -> None:
        """Hand back to the core an answer that came to ``fut`` before it was told of its
        recv, which an interruption kept it from taking."""
        early = fut.take_early()
        if early is not None and not early[0]:  # (code, message, dtype, shape, is_dead, payload)
            self.core.give_back(call.step_id, call.peer_id, call.key.name, *early[2:6])

    def _start(self, call: RecvCall, src: int, timeout: float) -> "_core.RecvHandle":
        """Start the core's recv settling ``call``, which the core owns from now on (a
        parked one's future becomes a weak proxy); cancelling its future gives it up."""
        call.peer_id = src
        fut = call.future
        if call.out is None and call.device is HOST:  # parked: the future takes the answer
            handle = self.core.recv_async(call.step_id, src, call.key.name, timeout, fut,
                                          (self._settle_parked_core, call))
            call.future = weakref.proxy(fut)  # (the future holds the call)
            return handle
        return self.core.recv_async(call.step_id, src, call.key.name, timeout, fut, None, call, self._settle_core,
                                    call.out and call.out.destination)

    def recv_from_remote(self, call: RecvCall) -> PendingRecv:
        op = _Connecting(str(call.key.src))
        op.task = self.rt.loop.submit(self._connect_then_start(call, op))
        return op

    async def _connect_then_start(self, call: RecvCall, op: _Connecting) -> None:
        try:
            await self.channels.connect(call.key.src)
        except asyncio.CancelledError:
            if not op.cancelled:  # the loop stops
                call.fail(UnavailableError(f"{call.what}: the server stopped while it set up the verbs channel"))
            raise
        except Exception as exc:
            call.fail(as_error(exc, f"{call.what}: setting up the verbs channel"))
            return
        if op.cancelled or call.future.done():
            return
        # a cancel from now on gives the core's recv up (also one that came meanwhile); the
        # core owns a copy of the call: recv_async, on its caller's thread, may not have
        # returned call.future yet, nor stop() failed it
        op.core = self._start(dataclasses.replace(call), self.ids[call.key.src], _timeout(call.time_left()))

    def _settle(self, call: RecvCall, code: int, message: str, dtype: int, shape: tuple, is_dead: bool,
                payload: Any, future: RecvFuture | None = None) -> bool:
        """Settle ``call`` with the core's answer, in the core's settler thread (or one that
        waits for it); False if it was cancelled already or its ``out`` refuses the tensor
        (which then goes back to the core for the next recv). A tensor for a device is
        handed to the peer's lane, which copies it there and settles the future (``future``:
        the one ``call`` holds only weakly, which the lane's work then holds)."""
        fut, src = call.future, call.peer_id
        if code == Code.DEADLINE_EXCEEDED and src != self.task_id:  # settled once the peer said what it holds
            self.rt.loop.submit(self._time_out_core(fut if future is None else future, call.key, call.step_id,
                                                    self.ids.named(message)))
            return True
        if code:
            return settle(fut, from_code(code, self.ids.named(message)))
        array = plain_array(dtype, shape, is_dead, payload) if call.out is None and call.device is HOST else None
        if array is not None:
            return self.delivery.settle_host(call, array, array.nbytes if src != self.task_id else None,
                                             self._core_give_back, call.step_id, src, call.key.name, dtype,
                                             shape, False, payload)
        try:
            value = Value(answer_array(dtype, shape, payload), is_dead)
        except Exception as exc:  # a malformed TensorProto
            settle(fut, as_error(exc, f"{call.what}: receiving the tensor"))
            return True
        if self.delivery.on_lane(call, value):
            if future is not None:  # (nothing else may hold it once this returns)
                call = dataclasses.replace(call, future=future)
            self.delivery.run_on_lane(call, self._settle_on_lane, call, src, value, dtype, shape, payload)
            return True
        return self._deliver(call, src, value, dtype, shape, payload)

    async def _time_out_core(self, fut: concurrent.futures.Future, key: RendezvousKey, step_id: int,
                             message: str) -> None:
        """Fail ``fut``, a recv of ``key`` at ``step_id`` that the core timed out with
        ``message``, saying what the peer holds under its name."""
        said = ""
        try:
            said = await self.held(key, step_id)
        finally:
            try:
                settle(fut, DeadlineExceededError(message + said))
            except ReferenceError:  # (a parked recv's future, dropped meanwhile)
                pass

    def _settle_parked(self, call: RecvCall, future: RecvFuture, code: int, message: str, dtype: int,
                       shape: tuple, is_dead: bool, payload: Any, arrived: float | None = None) -> bool:
        """:meth:`_settle` of a parked recv's answer, which its ``future`` took (``arrived``:
        when it came), or which the core's settler settles as it came (once something waits
        for the future); a tensor the future does not take (cancelled meanwhile) goes back
        to the core. True: nothing is left to give back."""
        call.arrived = arrived
        if not self._settle(call, code, message, dtype, shape, is_dead, payload, future) and not code:
            self.core.give_back(call.step_id, call.peer_id, call.key.name, dtype, shape, is_dead, payload)
        return True

    def _settle_on_lane(self, call: RecvCall, src: int, value: Value, dtype: int, shape: tuple,
                        payload: Any) -> None:
        """:meth:`_settle` of a tensor for a device, on its peer's lane; a tensor not taken
        goes back to the core."""
        if not self._deliver(call, src, value, dtype, shape, payload):
            self.core.give_back(call.step_id, src, call.key.name, dtype, shape, value.is_dead, payload)

    def _deliver(self, call: RecvCall, src: int, value: Value, dtype: int, shape: tuple,
                 payload: Any) -> bool:
        """Settle ``call`` with ``value``, the core's answer (``dtype``, ``shape``,
        ``payload``), which its future can give back to the core (the core counts a tensor
        from a peer in stats() as it arrives; a local recv is neither counted nor observed)."""
        nbytes = value.array.nbytes if src != self.task_id else None
        returned = payload if call.out is None else None  # into out: the landing's copy
        return self.delivery.settle(call, value, observe=nbytes, give_back=functools.partial(
            self._give_back, call.step_id, src, call.key.name, dtype, shape, returned))

    def _give_back(self, step_id: int, src: int, name: str, dtype: int, shape: tuple,
                   payload: Any, value: Value) -> None:
        """Hand a tensor a recv's future gives back (:mod:`..rendezvous.delivery`) to the
        core for the next recv of its name and step: ``payload`` as the core answered with
        it, or (None, a recv into ``out``) the copy of out's landing ``value`` holds."""
        self.core.give_back(step_id, src, name, dtype, shape, value.is_dead,
                            value.array if payload is None else payload)

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
