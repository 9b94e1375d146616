"""What a recv returns: numpy arrays (the default), or torch tensors sharing the received
memory, optionally cast on receipt.

A server's ``tensor_type`` ("numpy" or "torch"), overridden by a recv's own, and a recv's
``dtype=`` make its :class:`Results`. A torch result is a view of the received memory
(``torch.from_numpy``; bfloat16 and the float8 types, which numpy holds as ml_dtypes, are
viewed through an integer type of their size): no copy. ``dtype=`` casts in one pass (torch's
``to`` or numpy's ``astype``) into new memory. A received tensor of a dtype torch lacks
(strings, float8_e4m3b11fnuz) makes a torch recv fail with InvalidArgumentError naming it;
its tensor is kept for the next recv of its name and step.

A recv into ``out=`` returns ``out`` itself, whatever ``tensor_type``; a recv to a device
returns what that device holds (torch tensors on a GPU, stand-in arrays on ``cpu:proxy``).
A dead tensor is a :class:`tensorverbs.DeadTensor` array, or a torch tensor that
:func:`tensorverbs.is_dead` recognises as dead too.
"""
from __future__ import annotations

import concurrent.futures
import functools
from typing import Any, Callable

import numpy as np

from .devices import StandInArray
from .errors import InvalidArgumentError, TensorverbsError, as_error
from .rendezvous.future import RecvFuture, add_internal_callback
from .rendezvous.lanes import Lanes
from .tensor import DeadTensor, mark_dead, numeric_dtype
from .torch_interop import as_torch, import_torch, is_torch_dtype, is_torch_tensor, numpy_dtype_of, torch_dtype_of

#: the kinds of result a recv can return
TENSOR_TYPES = ("numpy", "torch")


@functools.cache
def _dead_torch_class() -> type:
    torch = import_torch()

    class DeadTorchTensor(torch.Tensor):  # type: ignore[name-defined]
        """The value of a dead tensor received as torch: a normal tensor that
        :func:`tensorverbs.is_dead` recognises (as :class:`tensorverbs.DeadTensor`, what
        operations on it make is of its class too)."""

        tensorverbs_dead = True

    return DeadTorchTensor


def mark_dead_torch(tensor: Any) -> Any:
    """``tensor`` as the value of a dead tensor (no copy)."""
    return tensor.as_subclass(_dead_torch_class())


class Results:
    """How a recv turns the array it received into its result: ``tensor_type`` "numpy" or
    "torch", and ``dtype`` (a numpy or torch dtype, or None) to cast to. A torch dtype
    means torch results unless ``tensor_type`` says "numpy" (then it needs a numpy
    equivalent). InvalidArgumentError for anything else."""

    def __init__(self, tensor_type: str | None = "numpy", dtype: Any = None,
                 default: str = "numpy") -> None:
        if tensor_type is not None and tensor_type not in TENSOR_TYPES:
            raise InvalidArgumentError(
                f"tensor_type must be one of {', '.join(map(repr, TENSOR_TYPES))}, not {tensor_type!r}")
        torch_cast = is_torch_dtype(dtype)
        self.torch = (tensor_type or ("torch" if torch_cast else default)) == "torch"
        self.np_dtype: np.dtype | None = None
        self.torch_dtype: Any = None
        if dtype is None:
            pass
        elif torch_cast:
            self.torch_dtype, self.np_dtype = dtype, numpy_dtype_of(dtype)
            if not self.torch and self.np_dtype is None:
                raise InvalidArgumentError(f"numpy has no dtype for {dtype}: receive it with tensor_type='torch'")
        else:
            self.np_dtype = numeric_dtype(dtype)
            if self.torch:
                self.torch_dtype = torch_dtype_of(self.np_dtype)
                if self.torch_dtype is None:
                    raise InvalidArgumentError(f"torch has no dtype for {self.np_dtype}: cast to one it has")
        if self.torch:
            import_torch()

    @property
    def casts(self) -> bool:
        """Whether results are cast (made anew, in one pass over the received tensor)."""
        return self.np_dtype is not None or self.torch_dtype is not None

    @property
    def identity(self) -> bool:
        """Whether results are the received arrays as they are."""
        return not self.torch and not self.casts

    def finish(self, value: Any) -> Any:
        """The result of a recv that received ``value`` (what the rendezvous made of it)."""
        if isinstance(value, list):  # a TensorList's
            return [self.finish(v) for v in value]
        if is_torch_tensor(value):  # on a GPU
            return value.to(self.torch_dtype) if self.torch_dtype is not None else value
        if not isinstance(value, np.ndarray):
            return value
        dead = isinstance(value, DeadTensor)
        if isinstance(value, StandInArray) or not self.torch:  # a device's own arrays stay so
            if self.np_dtype is None:
                return value
            cast = np.asarray(value).astype(self.np_dtype, copy=False)
            if isinstance(value, StandInArray):
                return cast.view(StandInArray)
            return mark_dead(cast) if dead else cast
        if self.torch_dtype is not None and self.np_dtype is not None and torch_dtype_of(value.dtype) is None:
            tensor = as_torch(np.asarray(value).astype(self.np_dtype))  # torch cannot read it: numpy casts
        else:
            tensor = as_torch(value)
            if self.torch_dtype is not None:
                tensor = tensor.to(self.torch_dtype)
        return mark_dead_torch(tensor) if dead else tensor


class ResultFuture(RecvFuture):
    """The future of a recv whose result :class:`Results` makes from the result of
    ``inner`` (the protocol's future): it settles once that is made (on the peer's lane
    when it casts, in the settling thread otherwise). Cancelling it cancels ``inner``; if
    the result cannot be made, the tensor goes back to the next recv of its name and step."""

    def __init__(self, inner: concurrent.futures.Future[Any], results: Results, lanes: Lanes,
                 peer: str) -> None:
        super().__init__(lanes, peer)
        self._inner, self._results, self._lanes_of = inner, results, lanes
        add_internal_callback(inner, self._arrived)

    def cancel(self) -> bool:
        if not self._inner.cancel():
            return False
        return super().cancel()

    def give_back(self) -> bool:
        return isinstance(self._inner, RecvFuture) and self._inner.give_back()

    def _arrived(self, inner: Any) -> None:
        if inner.cancelled():
            super().cancel()
            return
        error = inner.exception()
        if error is not None:
            _settle(self, error)
        elif self._results.casts:
            self._lanes_of.run(self._peer, self._make, inner.result())
        else:
            self._make(inner.result())

    def _make(self, value: Any) -> None:
        try:
            result = self._results.finish(value)
        except Exception as exc:
            self.give_back()
            error = as_error(exc, "making the recv's result")
            if isinstance(error, InvalidArgumentError):
                error = InvalidArgumentError(f"{error.message}; the tensor is kept for the next recv of it")
            _settle(self, error)
            return
        _settle(self, None, result)


def _settle(fut: RecvFuture, error: TensorverbsError | BaseException | None, result: Any = None) -> None:
    settle: Callable[..., Any] = fut.set_exception if error is not None else fut.set_result
    try:
        settle(error if error is not None else result)
    except concurrent.futures.InvalidStateError:  # it was cancelled already
        pass
