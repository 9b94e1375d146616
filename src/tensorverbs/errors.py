"""Errors: one base class carrying a status code, one subclass per code.

The codes are gRPC's (and so distributed TensorFlow's) status codes, so an error
crosses a process boundary as ``(code, message)`` and is rebuilt on the other side
as the same class. A deadline that ended a call is also Python's ``TimeoutError``, and a
cancel ``concurrent.futures.CancelledError``, so code written for Python's futures
catches them too.
"""
from __future__ import annotations

import concurrent.futures
import enum
import functools
import inspect
from typing import Any, Callable, Iterable, ParamSpec, TypeVar, cast

from .in_hand import emptied, give_back, give_up_started

P = ParamSpec("P")
T = TypeVar("T")


class Code(enum.IntEnum):
    """Status codes, numbered as gRPC and TensorFlow number them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class TensorverbsError(Exception):
    """Base of every error tensorverbs raises; ``code`` is a :class:`Code`."""

    code: Code = Code.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __reduce__(self) -> tuple[Callable[[int, str], TensorverbsError], tuple[int, str]]:
        # picklable across multiprocessing pipes
        return (from_code, (int(self.code), self.message))


class CancelledError(TensorverbsError, concurrent.futures.CancelledError):
    """The operation was cancelled (its caller gave up or the server stopped); also a
    ``concurrent.futures.CancelledError``."""

    code = Code.CANCELLED


class UnknownError(TensorverbsError):
    """An error without a better code."""

    code = Code.UNKNOWN


class InvalidArgumentError(TensorverbsError):
    """A bad argument: an unknown task, an unsupported dtype, an invalid setting."""

    code = Code.INVALID_ARGUMENT


class DeadlineExceededError(TensorverbsError, TimeoutError):
    """A timeout expired before the operation completed; also a ``TimeoutError``."""

    code = Code.DEADLINE_EXCEEDED


class NotFoundError(TensorverbsError):
    """Something named does not exist (a device, a port)."""

    code = Code.NOT_FOUND


class FailedPreconditionError(TensorverbsError):
    """The system is not in a state the operation needs (a stopped server, a restarted peer)."""

    code = Code.FAILED_PRECONDITION


class ResourceExhaustedError(TensorverbsError):
    """A limit was reached: the registered-memory pool, a queue."""

    code = Code.RESOURCE_EXHAUSTED


class AbortedError(TensorverbsError):
    """The step was aborted."""

    code = Code.ABORTED


class UnimplementedError(TensorverbsError):
    """The operation is not supported here."""

    code = Code.UNIMPLEMENTED


class InternalError(TensorverbsError):
    """A broken invariant or a malformed message from a peer."""

    code = Code.INTERNAL


class UnavailableError(TensorverbsError):
    """A peer cannot be reached, or died."""

    code = Code.UNAVAILABLE


class DataLossError(TensorverbsError):
    """Data arrived corrupted (a checksum mismatch)."""

    code = Code.DATA_LOSS


class PermissionDeniedError(TensorverbsError):
    """A peer refused a call made for another task than the one that made it (a task of
    the job acts only as itself)."""

    code = Code.PERMISSION_DENIED

    @classmethod
    def acting_for(cls, callers: Iterable[str], what: str, claimed: str) -> "PermissionDeniedError":
        """The refusal of a call by ``callers`` (the tasks it proves it comes from; none
        known: empty) that ``what`` (e.g. "takes the tensor 'w'") for ``claimed``."""
        by = " and ".join(sorted(c for c in callers if c)) or "a caller that proves no task"
        return cls(f"{by} {what} for {claimed}: a task acts only as itself")


class UnauthenticatedError(TensorverbsError):
    """A peer refused this task, or this task refused a peer: no valid job token, or a
    TLS handshake that failed (a plaintext peer, or one of another CA)."""

    code = Code.UNAUTHENTICATED


_BY_CODE: dict[Code, type[TensorverbsError]] = {
    cls.code: cls
    for cls in (
        CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
        NotFoundError, FailedPreconditionError, ResourceExhaustedError, AbortedError,
        UnimplementedError, InternalError, UnavailableError, DataLossError, PermissionDeniedError,
        UnauthenticatedError,
    )
}


def from_code(code: int, message: str) -> TensorverbsError:
    """Rebuild the error of ``code`` (an int or :class:`Code`) with ``message``."""
    try:
        cls = _BY_CODE[Code(code)]
    except ValueError:
        return UnknownError(f"(status code {code}) {message}")
    except KeyError:  # codes without a class of their own, OK included
        err = UnknownError(message)
        err.code = Code(code)
        return err
    return cls(message)


def as_error(exc: BaseException, what: str) -> TensorverbsError:
    """``exc`` as a TensorverbsError: itself if it is one, else a ResourceExhaustedError
    for lack of memory and an InternalError naming ``what`` failed for anything else. Every
    asynchronous boundary settles its caller with this, so no exception leaves a recv
    waiting forever."""
    if isinstance(exc, TensorverbsError):
        return exc
    if isinstance(exc, MemoryError):
        return ResourceExhaustedError(f"{what}: out of memory{': ' + str(exc) if str(exc) else ''}")
    return InternalError(f"{what} failed: {type(exc).__name__}: {exc}")


#: Python's own exception families: let out of tensorverbs' code, they mean a bug there
_BUGS = (ArithmeticError, AssertionError, AttributeError, BufferError, LookupError, MemoryError,
         NameError, OSError, RuntimeError, TypeError, ValueError)


#: set on a TypeError found to be the caller's, so that an outer public call passing the
#: arguments on (``**kwargs``) lets it through too
_CALLERS = "tensorverbs_callers"


def _callers(exc: BaseException, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> bool:
    """Whether ``exc`` is the caller's TypeError: ``args`` and ``kwargs`` do not bind to
    ``fn``'s signature (Python refused the call before it began), or an inner public call
    they were passed on to found them its caller's."""
    if not isinstance(exc, TypeError):
        return False
    if not getattr(exc, _CALLERS, False):
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            setattr(exc, _CALLERS, True)
        else:
            return False
    return True


def public(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn``, a public call, raising TensorverbsError only: one of Python's own exceptions
    it lets out (a bug, not the caller's mistake, which the call checks for) becomes one by
    :func:`as_error`, naming the call, with the original as its cause. Exceptions of other
    classes pass through: those of the caller's own code, such as a signal handler's, and
    the TypeError of arguments that do not fit ``fn``'s signature, unchanged.
    Received tensors the call took in hand (:mod:`tensorverbs.in_hand`) go back to their
    protocol when an exception of the caller's code ends it (a tensor that failed to make a
    result, malformed, is dropped with the call's TensorverbsError)."""
    if inspect.iscoroutinefunction(fn):  # the exceptions come as it is awaited
        @functools.wraps(fn)
        async def await_call(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                return await fn(*args, **kwargs)
            except TensorverbsError:  # (some are OSErrors too: TimeoutError)
                raise
            except _BUGS as exc:
                if _callers(exc, fn, args, kwargs):
                    raise
                raise as_error(exc, fn.__qualname__) from exc
        return cast(Callable[P, T], await_call)

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except TensorverbsError:  # (some are OSErrors too: TimeoutError)
            raise
        except _BUGS as exc:
            give_up_started()  # (the caller never gets their futures)
            if _callers(exc, fn, args, kwargs):
                raise
            raise as_error(exc, fn.__qualname__) from exc
        except BaseException:  # a signal handler's, as fn made or returned its result
            give_back()
            raise
        finally:
            emptied()  # (the caller has them, or they failed with the call)
    return call
