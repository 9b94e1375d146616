"""SharedTensors: one task's tensors passed by handle to tasks of its host.

A send of a GPU tensor to a task of the same host that sees that GPU (it said so in the
:class:`HostRegistry`), in another process, exports a copy of it (CUDA IPC) and sends its
descriptor, DT_VARIANT bytes under the tensor's rendezvous key, through the task's protocol.
The receiver's recv gets the descriptor, opens the handle, copies the tensor to where the
recv wants it (a new tensor on its GPU, its ``out``, the host) and sends
ReleaseSharedTensor, upon which the sender frees its copy. A step cleaned up or aborted
frees the exports of it that no receiver took; one taken (its descriptor left the table:
a recv has it, perhaps not opened yet) lives on until its receiver released it, its
receiver's process is gone (the host registry tells, checked every
:data:`WATCH_SECONDS`), or its send failed after all. The server stopping frees every export.

``device_ipc``: True shares every device that can be (the ``cpu:proxy`` stand-in too),
None (the default) CUDA GPUs, False nothing: every tensor then goes through host proxies.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from ..devices import Cuda, Device, StandIn
from ..errors import FailedPreconditionError, InvalidArgumentError, PermissionDeniedError
from ..in_hand import release_later
from ..rendezvous.local import Value
from ..tensor import DT_VARIANT
from .cuda_ipc import CudaIpc
from .descriptor import SharedTensorDescriptor
from .device_ipc import DeviceIpc, Export
from .host_registry import HostRegistry
from .releases import Releases
from .stand_in_ipc import StandInIpc

if TYPE_CHECKING:
    from .. import _core
    from ..rpc.auth import JobToken
    from ..cluster import ClusterSpec, TaskName
    from ..out import Out
    from ..rendezvous.key import RendezvousKey
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers
    from ..stats import Counters

log = logging.getLogger(__name__)

#: seconds between tries to write this task's host registry entry after a write failed
REGISTRY_RETRY = 5.0
#: seconds between looks at the receivers of exports that outlived their step (is the
#: receiver's process gone?)
WATCH_SECONDS = 1.0
_MODES = {"auto": None, "1": True, "yes": True, "on": True, "true": True,
          "0": False, "no": False, "off": False, "false": False}


def device_ipc_mode(value: bool | None) -> bool | None:
    """``value``, or TENSORVERBS_DEVICE_IPC (auto, 1/yes/on, 0/no/off) when it is None."""
    if value is not None:
        return bool(value)
    text = os.environ.get("TENSORVERBS_DEVICE_IPC", "auto").strip().lower() or "auto"
    if text not in _MODES:
        raise InvalidArgumentError(f"TENSORVERBS_DEVICE_IPC={text!r} is not valid: expected auto, 1 or 0")
    return _MODES[text]


@dataclass
class _Exported:
    """An export and what ends it: its step (None once it outlived it), the completion of
    its send, its receiver's address and process (as the host registry names it), and its
    receiver (the only task that may release it)."""

    step: int | None
    ipc: DeviceIpc
    export: Export
    sent: "_core.SendCompletion"
    receiver: str
    pid: int | None
    task: str

    def taken(self) -> bool:
        """Whether a receiver took its descriptor (its send is delivered, or under way)."""
        outcome = self.sent.outcome()
        return outcome is None or not outcome[0]


class SharedTensors:
    """The exports of one task (as a sender) and the opening of its peers' (as a receiver)."""

    def __init__(self, cluster: "ClusterSpec", task: "TaskName", incarnation: int, counters: "Counters",
                 loop: "EventLoopThread", peers: "Peers", mode: bool | None,
                 token: "JobToken | None" = None) -> None:
        """The shared tensors of ``task`` (of ``incarnation``) in ``cluster``: it counts them
        in ``counters`` and tells senders through ``peers``, on ``loop``, that it is done
        with theirs. ``mode``: device IPC on, off or None (auto: CUDA only). ``token``: the
        job's, which names its registry directory."""
        self.cluster, self.task, self.incarnation = cluster, task, incarnation
        self.counters, self.loop = counters, loop
        self.releases = Releases(task, loop, peers)
        self._exports: dict[int, _Exported] = {}
        self._watching = False  # a look at the exports that outlived their step is due
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ipcs: dict[type, DeviceIpc] = {}
        self._noted: set[type] = set()  # kinds of device the host knows this task sees
        self._retry_at = 0.0  # when a failed registry write may be tried again
        self.registry: HostRegistry | None = None
        if mode is False:
            return
        try:
            self.registry = HostRegistry(token=token)
        except FailedPreconditionError as exc:
            log.warning("%s: %s", task, exc.message)
            return
        self._ipcs[Cuda] = CudaIpc()
        if mode:
            self._ipcs[StandIn] = StandInIpc(self.registry.directory)

    def start(self) -> None:
        """The task serves its address now: say that it sees the stand-in, if shared
        (which every process of the host does; a GPU is noted when first used)."""
        if StandIn in self._ipcs:
            self.note(StandIn())

    def _ipc(self, device: Device) -> DeviceIpc | None:
        return self._ipcs.get(type(device))

    def note(self, device: Device) -> None:
        """This task uses ``device``: tell the host which devices of its kind it sees (a
        write that failed is tried again at a later use, at most every
        :data:`REGISTRY_RETRY` seconds)."""
        ipc = self._ipc(device)
        if (ipc is None or self.registry is None or type(device) in self._noted
                or time.monotonic() < self._retry_at):
            return
        try:
            self.registry.register(self.cluster.address(self.task), ipc.visible())
            self._noted.add(type(device))
        except OSError as exc:  # meanwhile peers send it their tensors through host proxies
            self._retry_at = time.monotonic() + REGISTRY_RETRY
            log.warning("%s: cannot write to the host registry (tried again in %g s): %s",
                        self.task, REGISTRY_RETRY, exc)

    # -- sending -----------------------------------------------------------------------------
    def offer(self, step_id: int, key: "RendezvousKey", value: Any, device: Device,
              ticket: "_core.SendTicket") -> Value | None:
        """The descriptor to send in place of ``value`` (a tensor on ``device``), carrying
        the send's ``ticket``, or None when it goes the usual way (the destination is not
        on this host or does not see the device, the device cannot share, or exporting
        failed: logged)."""
        ipc = self._ipc(device)
        if ipc is None or self.registry is None or key.dst == self.task:
            return None
        self.note(device)
        device_id = ipc.device_id(device)
        receiver = self.cluster.address(key.dst)
        if not self.registry.sees(receiver, device_id, elsewhere=not ipc.opens_own_exports):
            return None
        try:
            export = ipc.export(value, device)
        except Exception as exc:  # the host proxy still works
            log.warning("%s: cannot share %r by handle, sending it through a host proxy: %s",
                        self.task, key.name, exc)
            return None
        exported = _Exported(step_id, ipc, export, ticket.completion, receiver,
                             self.registry.process(receiver), str(key.dst))
        with self._lock:
            export_id = next(self._ids)
            self._exports[export_id] = exported
        self.counters.add("ipc_sent")
        return Value(SharedTensorDescriptor(ipc.kind, export.dtype, export.shape, self.incarnation,
                                            export_id, device_id, export.blobs, export.ints).encode(),
                     False, ticket)

    def withdraw(self, offered: Value) -> None:
        """Free the export behind a descriptor :meth:`offer` made that was not sent."""
        descriptor = SharedTensorDescriptor.decode(offered.array)
        with self._lock:
            entry = self._exports.pop(descriptor.export_id, None)
        if entry is not None:
            entry.ipc.release(entry.export, consumed=False)

    def release(self, incarnation: int, export_ids: Iterable[int],
                callers: set[str] | None = None) -> PermissionDeniedError | None:
        """A receiver copied exports ``export_ids`` out: free them (nothing for one unknown).
        ``callers``: the tasks the release proves it comes from (None: anyone's word is
        taken); an export of another receiver is kept, and the refusal says whose."""
        if incarnation != self.incarnation:
            return None
        with self._lock:
            known = {i: self._exports[i] for i in export_ids if i in self._exports}
            mine = [i for i, e in known.items() if callers is None or {e.task} == callers]
            entries = [self._exports.pop(i) for i in mine]
        self._free(entries, consumed=True)
        others = sorted({e.task for e in known.values()} - {e.task for e in entries})
        if not others:
            return None
        return PermissionDeniedError.acting_for(callers or (), f"releases shared tensors of {self.task}",
                                                ", ".join(others))

    def drop_step(self, step_id: int | None = None) -> None:
        """The end of ``step_id`` (of every step if None, as the server stops): free its
        exports that no receiver took (every export if None); those taken outlive it."""
        with self._lock:
            ended = [i for i, e in self._exports.items()
                     if step_id is None or (e.step == step_id and not e.taken())]
            dropped = [self._exports.pop(i) for i in ended]
            outlive = [e for e in self._exports.values() if step_id is not None and e.step == step_id]
            for exported in outlive:
                exported.step = None
            watch = bool(outlive) and not self._watching
            self._watching = self._watching or watch
        self._free(dropped, consumed=False)
        if watch:
            try:
                self.loop.call_soon(self._watch_later)
            except RuntimeError:  # the loop is closed: the server stops, freeing them all
                pass

    def _watch_later(self) -> None:
        asyncio.get_running_loop().call_later(WATCH_SECONDS, self._watch)

    def _watch(self) -> None:
        """On the loop: free the exports that outlived their step whose receiver's process
        is gone (it never releases them) or whose send failed after all (no receiver took
        it); look again later while some are left."""
        assert self.registry is not None  # (nothing is exported without it)
        with self._lock:
            orphans = [i for i, e in self._exports.items() if e.step is None and (
                not e.taken() or e.pid is None or self.registry.process(e.receiver) != e.pid)]
            dropped = [self._exports.pop(i) for i in orphans]
            again = self._watching = any(e.step is None for e in self._exports.values())
        self._free(dropped, consumed=False)
        if again:
            self._watch_later()

    def _free(self, entries: list[_Exported], consumed: bool) -> None:
        """Free the exports of ``entries`` (popped): each, whatever freeing another raised."""
        for entry in entries:
            try:
                entry.ipc.release(entry.export, consumed=consumed)
            except Exception as exc:  # freeing must not fail the cleanup of the step, nor the others
                log.warning("%s: freeing a shared tensor: %s", self.task, exc)

    def exports(self) -> int:
        """Tensors exported and not released yet."""
        return len(self._exports)

    def close(self) -> None:
        """Free every export and leave the host registry."""
        self.drop_step(None)
        if self.registry is not None:
            self.registry.unregister()

    # -- receiving ---------------------------------------------------------------------------
    @staticmethod
    def meta(dtype: int, shape: tuple[int, ...], payload: Any) -> tuple[int, tuple[int, ...]]:
        """(DataType, shape) of a received tensor: the shared tensor's for a descriptor
        (DataLossError if malformed), else as given."""
        if dtype != DT_VARIANT:
            return dtype, tuple(shape)
        descriptor = SharedTensorDescriptor.decode(payload)
        return descriptor.dtype, descriptor.shape

    def _opener(self, kind: int) -> DeviceIpc | None:
        """The DeviceIpc that opens descriptors of ``kind``, None if this task opens none.
        (A loop: a generator expression would be closed as it is dropped, after its
        caller went on.)"""
        for ipc in self._ipcs.values():
            if ipc.kind == kind:
                return ipc
        return None

    def deliver(self, payload: Any, src: "TaskName", device: Device, out: "Out | None" = None) -> Any:
        """The tensor a descriptor from ``src`` shares, copied to ``device`` (or into
        ``out``, which fits it, returning ``out``'s target); the sender is then told to
        free it, whatever happened (once the caller has it, for a descriptor in hand of a
        blocking call: :func:`~tensorverbs.in_hand.release_later`)."""
        descriptor = SharedTensorDescriptor.decode(payload)
        try:
            ipc = self._opener(descriptor.kind)
            if ipc is None:
                raise FailedPreconditionError(
                    f"{src} passed a tensor by handle (kind {descriptor.kind}), which this task "
                    "does not open (device IPC is off)")
            # a descriptor names memory of this host: only a sender of this host may name it
            if self.registry is None or self.registry.process(self.cluster.address(src)) is None:
                raise PermissionDeniedError(
                    f"{src} is not a task of this host (it has no live entry in the host's registry): "
                    "the tensor it passed by handle is refused unopened")
            opened = ipc.open(descriptor)
            if out is not None:
                ipc.fill(opened, out)
                result = out.target
            else:
                result = ipc.value(opened, device)
            del opened
        finally:
            if not release_later(self.releases.add, src, descriptor.incarnation, descriptor.export_id):
                self.releases.add(src, descriptor.incarnation, descriptor.export_id)
        self.counters.add("ipc_received")
        return result
