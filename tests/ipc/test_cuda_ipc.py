"""CudaIpc's checks, which run before CUDA is touched (so here too, without a GPU); the
transfers themselves are in test_shared_tensors.py and need one."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.ipc.cuda_ipc import CudaIpc, _enum, _torch_dtype
from tensorverbs.ipc.descriptor import CUDA, SharedTensorDescriptor
from tensorverbs.tensor import dtype_enum

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("name", DTYPES)
def test_dtypes_map_both_ways(name):
    enum = dtype_enum(np.dtype(name))
    dtype = _torch_dtype(enum)
    assert str(dtype) == f"torch.{name}"
    assert _enum(torch.empty(0, dtype=dtype)) == enum


def descriptor(blobs=(b"h" * 64, b"/torch_1", b"e" * 64), ints=(0, 4096, 0, 0, 1), shape=(1024,)):
    return SharedTensorDescriptor(CUDA, dtype_enum(np.dtype("float32")), shape, 1, 1, "GPU-x", blobs, ints)


@pytest.mark.parametrize("fields", [dict(blobs=(b"h",)), dict(ints=(0, 1))])
def test_a_descriptor_without_its_fields_is_refused(fields):
    with pytest.raises(tv.DataLossError, match="wrong number of fields"):
        CudaIpc().open(descriptor(**fields))


@pytest.mark.parametrize("offset, shape", [(1, (1024,)), (0, (1025,)), (1 << 40, (1,))])
def test_a_tensor_outside_its_storage_is_refused(offset, shape):
    with pytest.raises(tv.DataLossError, match="outside its storage of 4096 bytes"):
        CudaIpc().open(descriptor(ints=(offset, 4096, 0, 0, 1), shape=shape))


def test_a_gpu_this_process_does_not_see_is_named():
    with pytest.raises(tv.FailedPreconditionError, match="on GPU GPU-x, which this process does not see"):
        CudaIpc().open(descriptor())
