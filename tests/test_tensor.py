"""dtypes, meta-data and the TensorProto codec."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs import tensor as T
from tensorverbs.rpc import tensor_pb2


def test_dtype_numbers_are_tensorflows():
    expected = {np.float32: 1, np.float64: 2, np.int32: 3, np.uint8: 4, np.int16: 5, np.int8: 6,
                object: 7, np.complex64: 8, np.int64: 9, np.bool_: 10, ml_dtypes.bfloat16: 14,
                np.uint16: 17, np.complex128: 18, np.float16: 19, np.uint32: 22, np.uint64: 23,
                ml_dtypes.float8_e5m2: 24, ml_dtypes.float8_e4m3fn: 25, ml_dtypes.float8_e4m3fnuz: 26,
                ml_dtypes.float8_e4m3b11fnuz: 27, ml_dtypes.float8_e5m2fnuz: 28}
    for dtype, number in expected.items():
        assert T.dtype_enum(np.dtype(dtype)) == number
        assert T.numpy_dtype(number) == np.dtype(dtype)
    assert not T.is_dmaable(T.DT_STRING) and T.is_dmaable(1)
    with pytest.raises(tv.InvalidArgumentError):
        T.dtype_enum(np.dtype("datetime64[s]"))
    with pytest.raises(tv.InvalidArgumentError):
        T.numpy_dtype(77)


def test_proto_round_trip_and_wire_compatibility():
    strings = T.prepare(np.array([["a", b"bc"], [b"", "d\u00e9"]], dtype=object))
    data = T.encode_proto(strings)
    proto = tensor_pb2.TensorProto.FromString(data)
    assert proto.dtype == 7 and [d.size for d in proto.tensor_shape.dim] == [2, 2]
    assert list(proto.string_val) == [b"a", b"bc", b"", "d\u00e9".encode()]
    # field numbers as TensorFlow's: dtype=1, tensor_shape=2, string_val=8
    assert data[0] == (1 << 3) and b"\x42" in data
    assert T.decode_proto(data).tolist() == strings.tolist()
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(T.decode_proto(T.encode_proto(floats)), floats)


@pytest.mark.parametrize("data", [b"\xff\xff", tensor_pb2.TensorProto(dtype=1, tensor_content=b"abc").SerializeToString(),
                                  tensor_pb2.TensorProto(dtype=7, string_val=[b"a"], tensor_shape=tensor_pb2.TensorShapeProto(dim=[tensor_pb2.TensorShapeProto.Dim(size=2)])).SerializeToString()])
def test_malformed_protos_are_rejected(data):
    with pytest.raises(tv.InvalidArgumentError):
        T.decode_proto(data)


def test_meta_check():
    T.TensorMeta(1, (2, 3), False, 24).check()
    with pytest.raises(tv.InvalidArgumentError):
        T.TensorMeta(1, (2, 3), False, 25).check()
    with pytest.raises(tv.InvalidArgumentError):
        T.TensorMeta(1, (-1,), False, 0).check()


def test_prepare_makes_contiguous_and_keeps_rank():
    assert T.prepare(np.float32(2)).shape == ()
    view = np.arange(20).reshape(4, 5)[:, ::2]
    out = T.prepare(view)
    assert out.flags.c_contiguous and np.array_equal(out, view)
    big_endian = np.arange(3, dtype=">i4")
    assert T.prepare(big_endian).dtype == np.dtype("<i4")
    with pytest.raises(tv.InvalidArgumentError):
        T.prepare(np.array([1, "a"], dtype=object))


def test_raw_bytes_of_any_rank():
    for array in [np.float32(1.5).reshape(()), np.zeros((0, 3)), np.ones((2, 2), ml_dtypes.bfloat16)]:
        raw = T.raw_bytes(np.ascontiguousarray(array))
        assert raw.dtype == np.uint8 and raw.size == array.nbytes
