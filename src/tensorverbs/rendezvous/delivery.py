"""Delivery: a tensor that arrived for a recv becomes what its caller gets, the same for
every protocol (the protocols differ in how the bytes arrive, not in this).

The caller gets the array (a dead tensor marked so), a copy on its device, its ``out``
filled, or the tensor a descriptor shares opened; an ``out`` of another dtype or shape
refuses the tensor. Copies to a device and opening a shared tensor run on the lane of the
recv's peer (:mod:`.lanes`), never on the thread the tensor arrived on. Whatever making the
result raises settles the recv's future. A settled future learns how its protocol hands
the tensor to the next recv of its key and step (:meth:`RecvFuture.give_back`: a recv
given up just as its tensor came keeps it, whatever the protocol). Here too the received
tensors are counted and observed (:class:`~tensorverbs.metrics.recvs.RecvMetrics`) and
proxy copies counted.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from ..devices import HOST, Device
from ..errors import InvalidArgumentError, TensorverbsError, as_error
from ..ipc.descriptor import LIST_MAGIC, RELAY_MAGIC, is_descriptor, variant_magic
from ..out import Out
from ..tensor import dtype_enum, mark_dead
from ..tensor_list import is_packed, unpack
from .local import Value
from .recv_call import RecvCall, settle
from .relay_plan import Relayed, RelayDescriptor, is_relay

if TYPE_CHECKING:
    from ..cluster import TaskName
    from ..runtime import TaskRuntime


class Delivery:
    """Makes received tensors into recvs' results and settles their futures."""

    def __init__(self, runtime: "TaskRuntime") -> None:
        self.rt = runtime

    def on_lane(self, call: RecvCall, value: Value) -> bool:
        """Whether delivering ``value`` to ``call`` copies it to a device, opens a shared
        tensor or follows a relay (:meth:`run_on_lane` then)."""
        device = call.out.device if call.out is not None else call.device
        return not device.dma or variant_magic(value.array) not in (None, LIST_MAGIC)

    def run_on_lane(self, call: RecvCall, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the lane of ``call``'s peer."""
        self.rt.lanes.run(str(call.key.src), fn, *args)

    def observe(self, src: "TaskName", nbytes: int, started: float, count: bool = False,
                arrived: float | None = None) -> None:
        """A tensor of ``nbytes`` from ``src`` reached a recv started at ``started`` (now,
        or at ``arrived``); ``count``: also count it received (where the native core does
        not)."""
        if count:
            self.rt.counters.add("tensors_received")
            self.rt.counters.add("bytes_received", nbytes)
        self.rt.recvs.observe(str(src), nbytes, (time.monotonic() if arrived is None else arrived) - started)

    def refusal(self, out: Out | None, what: str, value: Value) -> TensorverbsError | None:
        """The error of ``out`` refusing ``value``'s tensor (another dtype or shape), None
        when it fits or there is no ``out``; DataLossError for a malformed descriptor."""
        if out is None:
            return None
        array = value.array
        if is_packed(array):
            return InvalidArgumentError(f"{what}: the sender sent a TensorList, which arrives as a list of "
                                        "arrays: receive it without out=; it is kept for the next recv of it")
        if is_relay(array):
            relay = RelayDescriptor.decode(array)
            dtype, shape = relay.dtype, relay.shape
        else:
            dtype, shape = self.rt.shared.meta(dtype_enum(array.dtype), array.shape, array)
        return None if out.fits(dtype, shape) else out.refusal(what, dtype, shape)

    def result(self, value: Value, src: "TaskName", device: Device, out: Out | None,
               call: RecvCall | None = None) -> Any:
        """What the caller of a recv from ``src`` gets of ``value``: on ``device``, or
        ``out`` holding it (``out`` fits it), or :class:`Relayed` for a relay's descriptor
        (followed before the caller sees anything); a TensorverbsError if it cannot be made
        (e.g. no memory for the copy to the device), naming ``call`` if given."""
        array = value.array
        magic = variant_magic(array)  # (None for any tensor but a descriptor or a TensorList)
        if magic == LIST_MAGIC and out is None and is_packed(array):  # a list of views of what arrived
            return [self.result(Value(a, value.is_dead), src, device, None, call) for a in unpack(array)]
        try:
            if magic == RELAY_MAGIC:  # fetched from the relay's parent next
                return Relayed(RelayDescriptor.decode(array), src)
            if magic is not None and magic != LIST_MAGIC:  # a tensor passed by handle
                return self.rt.shared.deliver(array, src, device, out)
            if out is not None:
                result = out.fill(array, value.is_dead)
                if not out.device.dma:
                    self.rt.counters.add("proxy_copies")
                return result
            if device is HOST:
                return mark_dead(array) if value.is_dead else array
            result = device.from_host(array)
            self.rt.counters.add("proxy_copies")
            return result
        except Exception as exc:
            target = (out.device if out is not None else device).name
            what = f"{call.what}: " if call is not None else ""
            raise as_error(exc, f"{what}making the received tensor for {target}") from exc

    def settle(self, call: RecvCall, value: Value, observe: int | None = None,
               give_back: Callable[[Value], object] | None = None) -> bool:
        """Settle ``call`` with ``value``; False if its caller already gave up or refuses
        the tensor (its ``out`` does not fit: the future fails with InvalidArgumentError),
        True once settled, also with whatever making the result raised. ``observe``: the
        bytes that crossed the network, observed once the recv takes them. ``give_back``:
        how the protocol hands ``value`` to the next recv of its key and step; the future
        can hand it back so (:meth:`RecvFuture.give_back`: a recv given up just as its
        tensor came, or whose result could not be made) unless the result is a shared
        tensor, whose handle is released."""
        fut = call.future
        if fut.done():
            return False
        try:
            error = self.refusal(call.out, call.what, value) if call.out is not None else None
            if error is not None:
                settle(fut, error)
                return False
            if observe is not None:
                self.observe(call.key.src, observe, call.started, arrived=call.arrived)
            result = self.result(value, call.key.src, call.device, call.out, call)
        except Exception as exc:
            settle(fut, as_error(exc, f"{call.what}: delivering the tensor"))
            return True
        if type(result) is Relayed:
            self.rt.relays.follow(call, result)
            return True
        if give_back is not None and not is_descriptor(value.array):
            if call.out is None:
                fut.returnable(give_back, value)
            else:  # out's landing holds it now: the future keeps no buffer of the transport
                fut.returnable(_hand_back_landing, Value(call.out.landing, value.is_dead, value.ticket), give_back)
        return settle(fut, None, result)


    def settle_host(self, call: RecvCall, array: Any, observe: int | None,
                    give_back: Callable[..., object], *args: Any) -> bool:
        """:meth:`settle` of a numeric host array (not dead) for a recv on the host without
        ``out``, whose result is the array itself: no refusal, lane or copy to consider;
        ``give_back(*args)`` hands it back."""
        fut = call.future
        if fut.done():
            return False
        if observe is not None:
            self.observe(call.key.src, observe, call.started, arrived=call.arrived)
        fut.returnable(give_back, *args)
        return settle(fut, None, array)


def _hand_back_landing(value: Value, give_back: Callable[[Value], object]) -> None:
    """Give back a tensor in ``out``'s landing (``value``) as a copy: its caller may reuse ``out``."""
    give_back(Value(value.array.copy(), value.is_dead, value.ticket))
