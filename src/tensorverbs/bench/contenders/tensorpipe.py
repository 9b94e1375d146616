"""torch.distributed.rpc over TensorPipe: the sink calls the source with ``rpc_sync``,
which answers with the tensor."""
from __future__ import annotations

from typing import Any

from .base import Payloads, Sink as BaseSink, Source as BaseSource
from . import torch_common

START_TOGETHER = True  # init_rpc waits for both sides
link = torch_common.link
SPINS_WHEN_IDLE = True  # its shared-memory transport polls: nearly a core per process
_tensors: dict[int, Any] = {}


def available() -> tuple[bool, str]:
    """Whether torch.distributed.rpc (TensorPipe) can run here, and why not."""
    ok, reason = torch_common.available("rpc")
    return ok, (reason + ", rpc_sync over TensorPipe") if ok else reason


def lookup(nbytes: int) -> Any:
    """Runs in the source on the sink's call: the tensor of that size."""
    return _tensors[nbytes]


def _init(name: str, rank: int, link: dict) -> None:
    from torch.distributed import rpc

    torch_common.quiet()
    options = rpc.TensorPipeRpcBackendOptions(init_method=link["init_method"], rpc_timeout=300)
    rpc.init_rpc(name, rank=rank, world_size=2, rpc_backend_options=options)


def _shutdown() -> None:
    from torch.distributed import rpc

    rpc.shutdown()


class Source(BaseSource):
    """The serving peer: answers RPCs with the payload."""

    def __init__(self, link: dict) -> None:
        _init("source", 0, link)
        self.payloads = Payloads()

    def serve(self, nbytes: int, count: int, step: int) -> None:
        import torch

        _tensors.clear()
        _tensors[nbytes] = torch.from_numpy(self.payloads.get(nbytes))

    def close(self) -> None:
        _shutdown()


class Sink(BaseSink):
    """The calling peer: fetches the payload by RPC."""

    def __init__(self, link: dict) -> None:
        super().__init__()
        _init("sink", 1, link)

    def fetch_one(self, nbytes: int, step: int) -> Any:
        from torch.distributed import rpc

        return rpc.rpc_sync("source", lookup, args=(nbytes,)).numpy()

    def close(self) -> None:
        _shutdown()
