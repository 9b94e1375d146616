"""RdmaMemoryMgr: registered memory and the meta-data cache of one adapter.

This is the one place that decides how a tensor's bytes meet registered memory:

* receiving, a tensor lands in a buffer of the registered pool (:meth:`land`); a DMAable
  tensor's result *is* that buffer (a numpy view; the space returns to the pool when the
  caller drops the array), a string tensor's TensorProto is decoded from it, and a tensor
  for a device the provider cannot reach is copied from it (the proxy, done by the
  rendezvous once the bytes are in);
* sending, a tensor is written from its own memory (:meth:`source`): memory of the pool
  needs nothing; other memory is registered for the duration of the write (counted in
  ``source_registrations``), except small tensors (below :data:`STAGE_BELOW` bytes, where
  a copy costs less than a registration) and memory that cannot be registered, which are
  staged into the pool (``staging_copies``); a string tensor is serialized into the pool
  (``proto_serializations``).
"""
from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..cluster import TaskName
from ..errors import TensorverbsError
from ..rendezvous.local import Value
from ..stats import Counters
from ..tensor import TensorMeta, decode_proto, encode_proto, meta_of, numpy_dtype, raw_bytes
from ..verbs import Access, ProtectionDomain, RdmaConfig
from ..verbs.pool import RegisteredPool


#: tensors smaller than this are copied into the pool rather than registered where they are
STAGE_BELOW = 64 << 10


def checksum(data: np.ndarray) -> int:
    """CRC-32 of a uint8 array (data validation mode)."""
    return zlib.crc32(data) if data.size else 0


@dataclass
class Landing:
    """Where one tensor lands: ``nbytes`` at ``addr``/``rkey`` (nothing for 0 bytes)."""

    meta: TensorMeta
    buffer: Any = None  # a pool buffer, None for an empty tensor

    @property
    def nbytes(self) -> int:
        return self.meta.nbytes

    @property
    def addr(self) -> int:
        return self.buffer.addr if self.buffer is not None else 0

    @property
    def rkey(self) -> int:
        return self.buffer.rkey if self.buffer is not None else 0

    @property
    def lkey(self) -> int:
        return self.buffer.lkey if self.buffer is not None else 0

    def data(self) -> np.ndarray:
        """The landed bytes (uint8)."""
        return self.buffer.array if self.buffer is not None else np.empty(0, np.uint8)

    def value(self) -> Value:
        """The received value; a DMAable result views the landing buffer itself."""
        meta, data = self.meta, self.data()
        self.buffer = None
        if meta.dmaable:
            array = data.view(numpy_dtype(meta.dtype)).reshape(meta.shape)
        else:
            array = decode_proto(data)
        return Value(array, meta.is_dead)


@dataclass
class Source:
    """The bytes of a tensor to write: ``nbytes`` at ``addr`` under ``lkey`` (``data``
    keeps the memory alive); ``release`` undoes a registration made for the write."""

    meta: TensorMeta
    data: np.ndarray
    addr: int = 0
    lkey: int = 0
    rkey: int = 0
    release: Callable[[], None] = lambda: None

    @property
    def nbytes(self) -> int:
        return int(self.data.size)


class RdmaMemoryMgr:
    """Registered memory of one adapter, and the meta-data cache of what it received."""

    def __init__(self, pd: ProtectionDomain, config: RdmaConfig, counters: Counters) -> None:
        self.pd = pd
        self.counters = counters
        self.pool = RegisteredPool(pd, config.pool_block_bytes, config.pool_limit_bytes, Access.all())
        self._meta: dict[tuple[TaskName, str], TensorMeta] = {}
        self._lock = threading.Lock()
        for name in ("registered_bytes", "pool_in_use_bytes", "registrations"):
            counters.gauge(name, lambda name=name: self.pool.stats()[name])

    # -- the meta-data cache (receiver side) ------------------------------------------------
    def cached_meta(self, peer: TaskName, name: str) -> TensorMeta | None:
        return self._meta.get((peer, name))

    def update_meta(self, peer: TaskName, name: str, meta: TensorMeta) -> None:
        with self._lock:
            self._meta[(peer, name)] = meta

    # -- receiving ----------------------------------------------------------------------
    def land(self, meta: TensorMeta) -> Landing:
        """A registered buffer for a tensor of ``meta``."""
        if meta.nbytes == 0:
            return Landing(meta)
        return Landing(meta, self.pool.allocate(meta.nbytes))

    # -- sending ------------------------------------------------------------------------
    def source(self, value: Value, remote_read: bool = False) -> Source:
        """The registered bytes of ``value`` to write (or to be read when ``remote_read``)."""
        array = value.array
        if array.dtype == object:
            proto = encode_proto(array)
            self.counters.add("proto_serializations")
            meta = meta_of(array, value.is_dead, len(proto))
            return self._staged(meta, np.frombuffer(proto, np.uint8))
        meta = meta_of(array, value.is_dead)
        data = raw_bytes(array)
        if data.size == 0:
            return Source(meta, data)
        addr = data.ctypes.data
        region = self.pool.region_of(addr, data.size)
        if region is not None:
            return Source(meta, data, addr, region.lkey, region.rkey)
        if data.size < STAGE_BELOW:
            self.counters.add("staging_copies")
            return self._staged(meta, data)
        try:
            mr = self.pd.reg_mr(data, Access.REMOTE_READ if remote_read else Access(0))
        except TensorverbsError:
            self.counters.add("staging_copies")
            return self._staged(meta, data)
        self.counters.add("source_registrations")
        return Source(meta, data, mr.addr, mr.lkey, mr.rkey, release=mr.close)

    def _staged(self, meta: TensorMeta, data: np.ndarray) -> Source:
        buffer = self.pool.allocate(max(1, data.size))
        buffer.array[:data.size] = data
        return Source(meta, buffer.array[:data.size], buffer.addr, buffer.lkey, buffer.rkey)

    def close(self) -> None:
        self.pool.close()
