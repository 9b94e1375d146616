"""The "grpc+verbs" protocol's blocks (:mod:`..rendezvous.blocks`): a whole batch in one call
to the native core, the GIL released once, with no Python object per entry; received blocks
land in their rows (or are copied there by the core)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import TensorverbsError, from_code
from ..rendezvous.blocks import Blocks
from ..rendezvous.key import RendezvousKey

if TYPE_CHECKING:
    from .. import _core
    from ..runtime import TaskRuntime
    from .task_ids import TaskIds


def _timeout(timeout: float | None) -> float:
    """A timeout as the core takes it (-1: none)."""
    return -1.0 if timeout is None else max(0.0, float(timeout))


class VerbsBlocks:
    """What :class:`~.rendezvous.VerbsRendezvous` does with blocks."""

    core: "_core.Rendezvous"
    ids: "TaskIds"
    rt: "TaskRuntime"
    task_id: int

    def _direct(self, key: RendezvousKey) -> int | None:
        raise NotImplementedError

    def send_blocks(self, step_id: int, key: RendezvousKey, blocks: Blocks, ticket: Any
                    ) -> tuple[int, TensorverbsError] | None:
        at, code, message = self.core.send_blocks(step_id, self.ids[key.dst], blocks.name, blocks.dtype,
                                                  blocks.shape, blocks.nbytes, blocks.array, blocks.rows, ticket)
        return None if at < 0 else (at, from_code(code, self.ids.named(message)))

    def recv_blocks(self, key: RendezvousKey, step_id: int, blocks: Blocks, timeout: float | None
                    ) -> list[tuple[int, TensorverbsError]] | None:
        src = self._direct(key)
        if src is None:  # its channel is not up yet: the recvs of each block set it up
            return None
        started = time.monotonic()
        failed = self.core.recv_blocks(step_id, src, blocks.name, blocks.dtype, blocks.shape, blocks.nbytes,
                                       blocks.array, blocks.rows, _timeout(timeout))
        errors = [(i, blocks.refusal(i, *theirs) if theirs is not None else from_code(code, self.ids.named(message)))
                  for i, code, message, theirs in failed]
        landed = len(blocks) - len(errors)
        if landed and src != self.task_id:
            self.rt.recvs.observe_batch(str(key.src), blocks.nbytes, landed, time.monotonic() - started)
        return errors
