"""tensorverbs as a Ray Direct Transport: torch tensors an actor method returns move to
the actors that take them as arguments through the actors' tensorverbs servers.

Every actor's server is task 0 of job ``actor-<actor id>``. Ray orchestrates a transfer
in three places. On the owner of the object (usually the driver),
:meth:`TensorverbsTransport.get_communicator_metadata` names the destination actor (its
handle). On the source, :meth:`~TensorverbsTransport.send_multiple_tensors` learns the
destination's server (``Server.add_task``; the first time, and again once its server
forgot the destination because its channel failed, it asks the destination for its task
and address in the concurrency group Ray keeps for aborts, the one that never waits for a
transfer) and offers each tensor to it (``send``, passive). On the destination,
:meth:`~TensorverbsTransport.recv_multiple_tensors` learns the source from the object's
metadata (a source that Ray restarted elsewhere moves there) and receives the tensors
(``recv``). The bytes travel as they are; Ray's metadata gives them back their shape and
dtype. One transfer is one tensorverbs step, derived from the object and the
destination's task, so :meth:`~TensorverbsTransport.abort_transport` fails exactly its
pending recvs.

An actor declared without ``enable_tensor_transport=True`` lacks the concurrency groups
Ray and the transport call it in, and a call in one of them ends its process: the source
does not call it, and its recv refuses the transfer (FailedPreconditionError, which Ray
gives the task that takes the object). Ray submits a transfer whose metadata it has
before the task; one it submits later waits behind the task, in the actor's only thread,
and Ray's wait for the tensors fails the task (after 60 s).

Ray registers a custom transport on an actor once: an actor Ray may restart calls
:func:`register_transport` in its ``__init__`` too, so that its restarted process has it.
A destination that restarts after its tensors arrived but before its task ran loses them:
Ray retries the task in the new process without another transfer, and the retry fails
after Ray's wait for the tensors (``RAY_rdt_fetch_fail_timeout_milliseconds``, 60 s).
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any, List, Optional

import ray
import torch
from ray.exceptions import GetTimeoutError, RayError
from ray.experimental import CommunicatorMetadata, TensorTransportMetadata

from ..errors import DeadlineExceededError, FailedPreconditionError, UnavailableError, UnimplementedError
from ..server import Server
from .actor_server import actor_server, own_task
from .tensors import as_bytes, as_tensor
from .transport_base import TransportBase


@dataclass
class TensorverbsTransportMetadata(TensorTransportMetadata):
    """The object's tensors (shapes, dtypes) and where its source's server is."""

    obj_id: str = ""
    source: str = ""    # the source's task name
    address: str = ""   # its host:port


@dataclass
class TensorverbsCommunicatorMetadata(CommunicatorMetadata):
    """The destination of one transfer: its actor handle."""

    destination: Any = None


def _transport(metadata: TensorTransportMetadata) -> TensorverbsTransportMetadata:
    """Ray hands a transport back the metadata it made."""
    assert isinstance(metadata, TensorverbsTransportMetadata)
    return metadata


def _communicator(metadata: CommunicatorMetadata) -> TensorverbsCommunicatorMetadata:
    """Ray hands a transport back the communicator metadata it made."""
    assert isinstance(metadata, TensorverbsCommunicatorMetadata)
    return metadata


def _step(obj_id: str, destination: str) -> int:
    """The tensorverbs step of the transfer of ``obj_id`` to task ``destination``."""
    digest = hashlib.blake2b(f"{obj_id}/{destination}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _has_concurrency_groups(actor: Any) -> bool:
    """Whether ``actor`` (a handle) was declared with ``enable_tensor_transport=True``:
    only then has it the concurrency groups Ray and this transport call it in (a call in a
    group an actor lacks ends its process, on a check of Ray's)."""
    return bool(getattr(actor, "_ray_enable_tensor_transport", True))


def _endpoint(actor: Any, transport: str, protocol: str, spare_tasks: int,
              token: str | None) -> tuple[str, str]:
    """On an actor, through ``__ray_call__``: its server's (task name, host:port)."""
    return actor_server(transport, protocol, spare_tasks, token).endpoint()


class TensorverbsTransport(TransportBase):
    """A two-sided Ray tensor transport over tensorverbs; :func:`register_transport` makes
    one per name with its settings (the class attributes below)."""

    name = "TENSORVERBS"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._steps: dict[str, set[int]] = {}  # the source's: object id -> its transfers' steps
        self._destinations: dict[Any, str] = {}  # the source's: actor handle -> its task

    @staticmethod
    def is_one_sided() -> bool:
        return False

    def extract_tensor_transport_metadata(self, obj_id: str, rdt_object: List[torch.Tensor]
                                          ) -> TensorverbsTransportMetadata:
        task, address = self.server.endpoint()
        return TensorverbsTransportMetadata(
            tensor_meta=[(t.shape, t.dtype) for t in rdt_object],
            tensor_device=rdt_object[0].device.type if rdt_object else None,
            obj_id=obj_id, source=task, address=address)

    def get_communicator_metadata(self, src_actor: "ray.actor.ActorHandle",
                                  dst_actor: "ray.actor.ActorHandle",
                                  backend: Optional[str] = None) -> TensorverbsCommunicatorMetadata:
        return TensorverbsCommunicatorMetadata(destination=dst_actor)

    def send_multiple_tensors(self, tensors: List[torch.Tensor],
                              tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata) -> None:
        actor = _communicator(communicator_metadata).destination
        if not _has_concurrency_groups(actor):
            return  # its recv refuses the transfer; a call to it would end it, as would Ray's abort
        server = self.server.get()
        destination = self._knowing(server, actor)
        obj_id = _transport(tensor_transport_metadata).obj_id
        step = _step(obj_id, destination)
        with self._lock:
            self._steps.setdefault(obj_id, set()).add(step)
        for i, tensor in enumerate(tensors):
            server.send(str(i), as_bytes(tensor), to=destination, step_id=step)

    def _knowing(self, server: Server, destination: Any) -> str:
        """The task of ``destination`` (an actor handle), once ``server`` knows it."""
        with self._lock:
            task = self._destinations.get(destination)
        if task is not None and server.knows(task):
            return task
        # not "_ray_system": there the destination may be waiting for a send queued here
        call = destination.__ray_call__.options(concurrency_group="_ray_system_error")
        try:
            task, address = ray.get(call.remote(_endpoint, self.name, self.protocol, self.spare_tasks, self.token),
                                    timeout=self.timeout)
        except GetTimeoutError:
            raise DeadlineExceededError(
                f"actor {destination} did not tell its {self.name} server's address within "
                f"{self.timeout:g} s") from None
        except RayError as exc:
            raise UnavailableError(
                f"actor {destination} could not tell its {self.name} server's address: {exc}") from None
        self.learn(task, address)
        with self._lock:
            self._destinations[destination] = task
        return task

    def learn(self, task: str, address: str) -> Server:
        """This actor's server, having learned ``task`` at ``address`` (where a task Ray
        restarted moved)."""
        return self.server.learn(task, address)

    def recv_multiple_tensors(self, obj_id: str,
                              tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata,
                              target_buffers: Optional[List[Any]] = None) -> List[torch.Tensor]:
        if target_buffers:
            raise UnimplementedError(f"the {self.name} transport does not receive into given buffers")
        actor = ray.get_runtime_context().current_actor
        if not _has_concurrency_groups(actor):  # Ray gives this error to the task that takes the object
            raise FailedPreconditionError(
                f"actor {actor} was declared without enable_tensor_transport=True: it cannot take "
                f"tensors of the {self.name} transport (declare it @ray.remote(enable_tensor_transport=True))")
        meta = _transport(tensor_transport_metadata)
        server = self.learn(meta.source, meta.address)
        step = _step(obj_id, own_task())
        try:
            futures = [server.recv_async(str(i), meta.source, step, self.timeout)
                       for i in range(len(meta.tensor_meta))]
            return [as_tensor(f.result(), shape, dtype) for f, (shape, dtype) in zip(futures, meta.tensor_meta)]
        except BaseException as exc:
            server.abort_step(step, f"receiving object {obj_id} failed: {exc}")  # the other recvs
            raise
        finally:
            server.cleanup_step(step)

    def garbage_collect(self, obj_id: str, tensor_transport_meta: TensorTransportMetadata,
                        tensors: List[torch.Tensor]) -> None:
        with self._lock:
            steps = self._steps.pop(obj_id, ())
        for step in steps:
            self.server.get().cleanup_step(step)

    def abort_transport(self, obj_id: str, communicator_metadata: CommunicatorMetadata) -> None:
        destination = _communicator(communicator_metadata).destination
        if destination is None or destination == ray.get_runtime_context().current_actor:
            task: str | None = own_task()  # the destination's recvs
        else:
            with self._lock:
                task = self._destinations.get(destination)  # the source's sends, if any
        if task is not None:
            self.server.get().abort_step(_step(obj_id, task), f"Ray aborted the transfer of object {obj_id}")
