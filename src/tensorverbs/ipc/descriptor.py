"""SharedTensorDescriptor: what travels in place of a tensor passed by handle.

A tensor two tasks of one host can both reach (a GPU both see) is not copied through the
transport: its sender exports it (a CUDA IPC handle) and sends this descriptor instead,
as DT_VARIANT bytes under the tensor's own rendezvous key. The receiver opens the handle,
copies the tensor out and tells the sender to free it (ReleaseSharedTensor).

The bytes come from a peer, so :meth:`SharedTensorDescriptor.decode` checks every field
and length before anything is taken from them; malformed input raises DataLossError.

Layout (little-endian): magic ``TVSH``, version u8, kind u8, dtype i32, rank u8, rank
dims i64, owner incarnation u64, export id u64, device (u8 length + UTF-8), blob count
u8 and each blob (u16 length + bytes), integer count u8 and each integer (u64).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..byte_reader import ByteReader
from ..errors import DataLossError
from ..tensor import VARIANT_DTYPE, numpy_dtype

MAGIC = b"TVSH"
#: a packed TensorList's (:mod:`tensorverbs.tensor_list`), the other DT_VARIANT bytes
LIST_MAGIC = b"TVLS"
#: a relay broadcast's descriptor's (:mod:`tensorverbs.rendezvous.relay_plan`)
RELAY_MAGIC = b"TVRL"
VERSION = 1
#: kinds of handle: a CUDA IPC memory handle, or a file of the host's shared memory (the
#: ``cpu:proxy`` stand-in's)
CUDA, STAND_IN = 1, 2
KINDS = (CUDA, STAND_IN)

_HEAD = struct.Struct("<4sBBiB")
_IDS = struct.Struct("<QQ")
_MAX_BLOBS, _MAX_INTS, _MAX_BLOB = 8, 16, 4096


@dataclass(frozen=True)
class SharedTensorDescriptor:
    """A tensor shared by handle: its kind of handle, meta-data, whose it is and the
    handle itself (``blobs`` and ``ints``, as the kind defines them)."""

    kind: int
    dtype: int
    shape: tuple[int, ...]
    incarnation: int
    export_id: int
    device: str
    blobs: tuple[bytes, ...] = ()
    ints: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * numpy_dtype(self.dtype).itemsize

    def encode(self) -> np.ndarray:
        """The descriptor as DT_VARIANT bytes: a 1-D array of :data:`VARIANT_DTYPE`."""
        device = self.device.encode()
        parts = [_HEAD.pack(MAGIC, VERSION, self.kind, self.dtype, len(self.shape)),
                 struct.pack(f"<{len(self.shape)}q", *self.shape),
                 _IDS.pack(self.incarnation, self.export_id),
                 struct.pack("<B", len(device)), device, struct.pack("<B", len(self.blobs))]
        for blob in self.blobs:
            parts += [struct.pack("<H", len(blob)), blob]
        parts += [struct.pack(f"<B{len(self.ints)}Q", len(self.ints), *self.ints)]
        return np.frombuffer(b"".join(parts), VARIANT_DTYPE)

    @classmethod
    def decode(cls, data: bytes | memoryview | np.ndarray) -> "SharedTensorDescriptor":
        """Parse DT_VARIANT bytes from a peer; DataLossError if they are not a descriptor."""
        raw: Any = data  # numpy's stubs leave out arrays' buffer protocol
        reader = ByteReader(bytes(memoryview(raw).cast("B")), "shared tensor descriptor")
        magic, version, kind, dtype, rank = reader.take(_HEAD)
        if magic != MAGIC or version != VERSION:
            raise DataLossError(f"not a shared tensor descriptor (magic {magic!r}, version {version})")
        if kind not in KINDS:
            raise DataLossError(f"shared tensor descriptor of unknown kind {kind}")
        shape = reader.shape(dtype, rank)
        incarnation, export_id = reader.take(_IDS)
        device = reader.raw(reader.take(struct.Struct("<B"))[0])
        blobs = []
        for _ in range(reader.count(_MAX_BLOBS, "blobs")):
            blobs.append(reader.blob(_MAX_BLOB))
        ints = reader.take(struct.Struct(f"<{reader.count(_MAX_INTS, 'integers')}Q"))
        reader.end()
        try:
            name = device.decode()
        except UnicodeDecodeError:
            raise DataLossError("shared tensor descriptor whose device name is not UTF-8") from None
        return cls(kind, dtype, tuple(shape), incarnation, export_id, name, tuple(blobs), tuple(ints))


def variant_magic(array: np.ndarray) -> bytes | None:
    """The magic a received array of DT_VARIANT bytes starts with (:data:`MAGIC`, a packed
    TensorList's, a relay's), None for an array of any other dtype."""
    return array[:4].view(np.uint8).tobytes() if array.dtype == VARIANT_DTYPE else None


def is_descriptor(array: np.ndarray) -> bool:
    """Whether a received array is a shared tensor's descriptor (DT_VARIANT bytes that are
    not a packed TensorList nor a relay's descriptor: a malformed one fails as a shared
    tensor's descriptor)."""
    return variant_magic(array) not in (None, LIST_MAGIC, RELAY_MAGIC)
