"""The ibverbs provider: the verbs object model over real RDMA devices via pyverbs.

One module per concept: :mod:`.provider` (availability, listing, opening), :mod:`.selection`
(device/port/GID/MTU choice from RDMA_* settings, pure), :mod:`.discovery` (what the devices
report), :mod:`.device` (the open context), :mod:`.memory` (PD, MR), :mod:`.cq`, :mod:`.qp`,
and :mod:`._pyverbs` (lazy import, error translation). Importing this package does not
import pyverbs.
"""
from .provider import IbverbsProvider

__all__ = ["IbverbsProvider"]
