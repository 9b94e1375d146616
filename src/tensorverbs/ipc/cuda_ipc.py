"""CudaIpc: CUDA tensors passed between processes of one host by CUDA IPC memory handle.

torch does the CUDA side (``torch.multiprocessing.reductions``): the sender's copy of the
tensor is exported with an IPC memory handle, an interprocess event recorded after the
copy and a reference counter in shared memory; the receiver opens the handle on its own
index of the same GPU (found by UUID), waits for the event, copies the tensor out on a
stream of its own and drops the handle, which releases the counter. The sender frees
its copy when the receiver said so (or its step ends unreceived, releasing the counter
itself), so the memory is never freed under a reader.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..devices import HOST, Cuda, Device
from ..dlpack import host_view
from ..errors import DataLossError, FailedPreconditionError, InvalidArgumentError
from ..out import Out
from ..tensor import dtype_enum, numpy_dtype
from ..torch_interop import numpy_dtype_of, torch_dtype_of
from .descriptor import CUDA as KIND, SharedTensorDescriptor
from .device_ipc import DeviceIpc, Export


def _torch_dtype(enum: int) -> Any:
    dtype = torch_dtype_of(numpy_dtype(enum))
    if dtype is None:
        raise DataLossError(f"a CUDA tensor of {numpy_dtype(enum)}, which torch lacks, cannot be shared")
    return dtype


def _enum(tensor: Any) -> int:
    dtype = numpy_dtype_of(tensor.dtype)
    if dtype is None:
        raise InvalidArgumentError(f"tensorverbs does not move {tensor.dtype} tensors")
    return dtype_enum(dtype)


def _torch(tensor: Any) -> Any:
    """``tensor`` as a torch tensor (one of another library through DLPack, no copy)."""
    import torch

    return tensor if isinstance(tensor, torch.Tensor) else torch.from_dlpack(tensor)


@functools.lru_cache(maxsize=None)
def _uuids() -> tuple[str, ...]:
    """The UUIDs of the GPUs this process sees, by torch's index."""
    import torch

    return tuple(str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count()))


class CudaIpc(DeviceIpc):
    """CUDA tensors through torch's CUDA IPC."""

    kind = KIND
    opens_own_exports = False  # cudaIpcOpenMemHandle refuses a handle of its own process

    def device_id(self, device: Device) -> str:
        assert isinstance(device, Cuda)
        return _uuids()[device.index]

    def visible(self) -> set[str]:
        return set(_uuids())

    def export(self, value: Any, device: Device) -> Export:
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        copy = _torch(value).detach().clone(memory_format=torch.contiguous_format)
        # reduce_tensor records the interprocess event the receiver waits for
        (_, (_, size, _, offset, _, _, _, handle, storage_bytes, storage_offset, _,
             counter, counter_offset, event, event_sync)) = reduce_tensor(copy)
        return Export(_enum(copy), tuple(size), (handle, counter, event or b""),
                      (offset, storage_bytes, storage_offset, counter_offset, int(bool(event_sync))),
                      copy)

    def release(self, export: Export, consumed: bool) -> None:
        if not consumed:  # nobody opened it: release the receiver's reference ourselves
            import torch

            _, counter, _ = export.blobs
            torch.UntypedStorage._release_ipc_counter(counter, export.ints[3], device=export.keep.device)
        export.keep = None

    def open(self, descriptor: SharedTensorDescriptor) -> Any:
        import torch
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        if len(descriptor.blobs) != 3 or len(descriptor.ints) != 5:
            raise DataLossError("CUDA shared tensor descriptor with the wrong number of fields")
        handle, counter, event = descriptor.blobs
        offset, storage_bytes, storage_offset, counter_offset, event_sync = descriptor.ints
        itemsize = numpy_dtype(descriptor.dtype).itemsize
        if offset * itemsize + descriptor.nbytes > storage_bytes:
            raise DataLossError(f"CUDA shared tensor of {descriptor.nbytes} bytes at element {offset} "
                                f"lies outside its storage of {storage_bytes} bytes")
        try:
            index = _uuids().index(descriptor.device)
        except ValueError:
            raise FailedPreconditionError(
                f"the tensor is on GPU {descriptor.device}, which this process does not see "
                "(CUDA_VISIBLE_DEVICES?)") from None
        shape = descriptor.shape
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
        return rebuild_cuda_tensor(
            torch.Tensor, torch.Size(shape), strides, offset, torch.UntypedStorage,
            _torch_dtype(descriptor.dtype), index, handle, storage_bytes, storage_offset, False,
            counter, counter_offset, event or None, bool(event_sync))

    def value(self, opened: Any, device: Device) -> Any:
        if isinstance(device, Cuda):
            return self._copy(opened, device, None)
        return device.from_host(host_view(opened.cpu()))

    def fill(self, opened: Any, out: Out) -> None:
        if isinstance(out.device, Cuda):
            self._copy(opened, out.device, _torch(out.target).detach())
        else:
            np.copyto(out.landing, self.value(opened, HOST))
            out.device.store(out.target, out.landing)

    @staticmethod
    def _copy(opened: Any, device: Device, into: Any) -> Any:
        """``opened`` copied into ``into`` (a new tensor on ``device`` if None), on a stream
        of ``device`` that first waits for the work queued on its current stream."""
        import torch

        target = torch.empty_like(opened, device=device.name) if into is None else into
        stream = torch.cuda.Stream(device.name)
        stream.wait_stream(torch.cuda.current_stream(device.name))
        with torch.cuda.stream(stream):
            target.view(-1).copy_(opened.view(-1), non_blocking=True)
        stream.synchronize()
        return target
