"""tensorverbs as a one-sided Ray Direct Transport: the torch tensors a method returns
are registered on its process's server (``Server.register``, read-only), their
RemoteBuffers travel in the object's metadata, and whoever takes the object reads them
(``Server.read``) without the source taking part: another actor, or the driver's
``ray.get``. Ray garbage-collects the object on the source, which unregisters them.

The reader learns the source's server from the metadata (``Server.add_task``; a source
Ray restarted has registered nothing the old metadata names, so its read fails with
UnavailableError). An aborted transfer fails the reads of its object that have not
started; one under way ends within the transport's timeout.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, List, Optional, cast

import ray
import torch
from ray.experimental import CommunicatorMetadata, TensorTransportMetadata

from ..errors import AbortedError, UnimplementedError
from ..one_sided import RemoteBuffer
from .tensors import as_bytes, as_tensor
from .transport_base import TransportBase


@dataclass
class TensorverbsReadMetadata(TensorTransportMetadata):
    """The object's tensors (shapes, dtypes), their buffers and where their server is."""

    source: str = ""    # the source's task name
    address: str = ""   # its host:port
    #: one per tensor; None for an empty one
    buffers: List[Optional[RemoteBuffer]] = field(default_factory=list)


class TensorverbsReadTransport(TransportBase):
    """A one-sided Ray tensor transport over tensorverbs; :func:`register_transport` with
    ``one_sided=True`` makes one per name with its settings (the class attributes below)."""

    name = "TENSORVERBS_READ"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._registered: dict[str, list[Optional[RemoteBuffer]]] = {}  # the source's, by object
        self._aborted: set[str] = set()  # the reader's

    @staticmethod
    def is_one_sided() -> bool:
        return True

    def registered(self) -> int:
        """How many objects' tensors this process holds registered."""
        with self._lock:
            return len(self._registered)

    def extract_tensor_transport_metadata(self, obj_id: str, rdt_object: List[torch.Tensor]
                                          ) -> TensorverbsReadMetadata:
        server = self.server.get()
        buffers = [server.register(as_bytes(t), writable=False) if t.numel() else None for t in rdt_object]
        with self._lock:
            self._registered[obj_id] = buffers
        task, address = self.server.endpoint()
        return TensorverbsReadMetadata(
            tensor_meta=[(t.shape, t.dtype) for t in rdt_object],
            tensor_device=rdt_object[0].device.type if rdt_object else None,
            source=task, address=address, buffers=buffers)

    def get_communicator_metadata(self, src_actor: "ray.actor.ActorHandle",
                                  dst_actor: "ray.actor.ActorHandle",
                                  backend: Optional[str] = None) -> CommunicatorMetadata:
        return CommunicatorMetadata()

    def recv_multiple_tensors(self, obj_id: str,
                              tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata,
                              target_buffers: Optional[List[Any]] = None) -> List[torch.Tensor]:
        assert isinstance(tensor_transport_metadata, TensorverbsReadMetadata)
        meta = tensor_transport_metadata
        server = self.server.learn(meta.source, meta.address)
        tensors = []
        for i, (buffer, (shape, dtype)) in enumerate(zip(meta.buffers, meta.tensor_meta, strict=True)):
            with self._lock:
                if obj_id in self._aborted:
                    raise AbortedError(f"Ray aborted the transfer of object {obj_id}")
            target = target_buffers[i] if target_buffers else None
            if buffer is None:
                tensors.append(torch.empty(shape, dtype=cast(torch.dtype, dtype)) if target is None else target)
            elif target is not None and target.is_contiguous():
                server.read(buffer, as_bytes(target), timeout=self.timeout)  # in place
                tensors.append(target)
            else:
                got = as_tensor(server.read(buffer, timeout=self.timeout).reshape(-1).view("uint8"), shape, dtype)
                tensors.append(got if target is None else target.copy_(got))
        return tensors

    def send_multiple_tensors(self, tensors: List[torch.Tensor],
                              tensor_transport_metadata: TensorTransportMetadata,
                              communicator_metadata: CommunicatorMetadata) -> None:
        raise UnimplementedError(f"{self.name} is one-sided: Ray never asks its source to send")

    def garbage_collect(self, obj_id: str, tensor_transport_meta: TensorTransportMetadata,
                        tensors: List[torch.Tensor]) -> None:
        with self._lock:
            buffers = self._registered.pop(obj_id, [])
        for buffer in buffers:
            if buffer is not None:
                self.server.get().unregister(buffer)

    def abort_transport(self, obj_id: str, communicator_metadata: CommunicatorMetadata) -> None:
        with self._lock:
            self._aborted.add(obj_id)
