"""torch tensors as the bytes tensorverbs moves, and back (Ray's metadata keeps their
shapes and dtypes)."""
from __future__ import annotations

from typing import Any

import torch


def as_bytes(tensor: torch.Tensor) -> Any:
    """The tensor's bytes as a numpy array (a view of a contiguous tensor)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


def as_tensor(array: Any, shape: Any, dtype: Any) -> torch.Tensor:
    """The tensor of ``shape`` and ``dtype`` whose bytes ``array`` holds (no copy)."""
    return torch.from_numpy(array).view(dtype).reshape(shape)
