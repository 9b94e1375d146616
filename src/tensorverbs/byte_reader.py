"""ByteReader: reads the fields of bytes a peer sent (a descriptor of a tensor passed by
handle, of a relay), in order, never past their end: anything malformed raises
DataLossError naming what was being read."""
from __future__ import annotations

import math
import struct

from .errors import DataLossError, InvalidArgumentError
from .tensor import DT_STRING, DT_VARIANT, MAX_RANK, numpy_dtype

_COUNT = struct.Struct("<B")
_LENGTH = struct.Struct("<H")


class ByteReader:
    """The fields of ``data``, ``what`` they make (for messages: "relay descriptor")."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.what, self.at = data, what, 0

    def raw(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise DataLossError(f"{self.what} cut short at byte {len(self.data)}")
        self.at += size
        return self.data[self.at - size:self.at]

    def take(self, layout: struct.Struct) -> tuple:
        return layout.unpack(self.raw(layout.size))

    def count(self, limit: int, what: str) -> int:
        """A u8 count of ``what``, at most ``limit``."""
        n = self.take(_COUNT)[0]
        if n > limit:
            raise DataLossError(f"{self.what} with {n} {what} (at most {limit})")
        return n

    def blob(self, limit: int) -> bytes:
        """A u16 length and that many bytes, at most ``limit``."""
        size = self.take(_LENGTH)[0]
        if size > limit:
            raise DataLossError(f"{self.what} with a field of {size} bytes (at most {limit})")
        return self.raw(size)

    def text(self, limit: int) -> str:
        """A :meth:`blob` of UTF-8."""
        try:
            return self.blob(limit).decode()
        except UnicodeDecodeError:
            raise DataLossError(f"{self.what} with a name that is not UTF-8") from None

    def shape(self, dtype: int, rank: int) -> tuple[int, ...]:
        """The ``rank`` i64 dims of a tensor of DataType ``dtype``, which a descriptor
        gives: a numeric DataType and a shape numpy can make an array of."""
        if dtype in (DT_STRING, DT_VARIANT):
            raise DataLossError(f"{self.what} of DataType {dtype}, which is never shared nor relayed")
        try:
            itemsize = numpy_dtype(dtype).itemsize
        except InvalidArgumentError:
            raise DataLossError(f"{self.what} of unknown DataType {dtype}") from None
        if rank > MAX_RANK:
            raise DataLossError(f"{self.what} of rank {rank} (at most {MAX_RANK})")
        shape = self.take(struct.Struct(f"<{rank}q"))
        if any(d < 0 for d in shape) or math.prod(shape) * itemsize >= 1 << 63:
            raise DataLossError(f"{self.what} of invalid shape {shape}")
        return tuple(shape)

    def end(self) -> None:
        if self.at != len(self.data):
            raise DataLossError(f"{self.what} with {len(self.data) - self.at} bytes past its end")
