"""Lazy access to pyverbs and the translation of its exceptions into tensorverbs errors.

pyverbs is rdma-core's Cython binding of libibverbs. It is imported on first use only,
so tensorverbs imports and runs (with another provider) where it is missing.
"""
from __future__ import annotations

import contextlib
import errno
import importlib
import os
from types import SimpleNamespace
from typing import Iterator

from ...errors import (
    Code, DeadlineExceededError, InternalError, InvalidArgumentError, NotFoundError,
    ResourceExhaustedError, TensorverbsError, UnavailableError, UnimplementedError, from_code,
)

_MODULES = ("device", "pd", "mr", "cq", "qp", "wr", "addr", "enums", "pyverbs_error")
_loaded: SimpleNamespace | None = None
_import_error: str | None = None


def load() -> SimpleNamespace:
    """The pyverbs modules as attributes (``pv.device``, ``pv.qp``, ``pv.enums`` ...);
    raises UnavailableError when pyverbs cannot be imported."""
    global _loaded, _import_error
    if _loaded is None and _import_error is None:
        try:
            _loaded = SimpleNamespace(**{
                name: importlib.import_module(f"pyverbs.{name}") for name in _MODULES})
        except ImportError as exc:  # pyverbs missing, or its libibverbs
            _import_error = f"{type(exc).__name__}: {exc}"
    if _loaded is None:
        raise UnavailableError(
            f"pyverbs is not installed ({_import_error}); install rdma-core's Python binding, "
            "e.g. the Debian package python3-pyverbs")
    return _loaded


def missing_reason() -> str | None:
    """Why pyverbs cannot be used, or None when it can."""
    try:
        load()
    except UnavailableError:
        return "pyverbs is not installed"
    return None


# errno -> the tensorverbs error class that says what a caller can do about it
_BY_ERRNO: dict[int, type[TensorverbsError]] = {
    errno.ENOMEM: ResourceExhaustedError,
    errno.ENOSPC: ResourceExhaustedError,
    errno.EMFILE: ResourceExhaustedError,
    errno.EINVAL: InvalidArgumentError,
    errno.ERANGE: InvalidArgumentError,
    errno.ENOENT: NotFoundError,
    errno.ENODEV: UnavailableError,
    errno.ENXIO: UnavailableError,
    errno.EAGAIN: UnavailableError,
    errno.EBUSY: UnavailableError,
    errno.EIO: UnavailableError,
    errno.ETIMEDOUT: DeadlineExceededError,
    errno.EOPNOTSUPP: UnimplementedError,
    errno.ENOSYS: UnimplementedError,
}


def convert(exc: BaseException, what: str) -> TensorverbsError:
    """The tensorverbs error for a pyverbs exception raised while doing ``what``."""
    pv = _loaded
    text = str(exc).strip() or type(exc).__name__
    code = getattr(exc, "error_code", None)
    if isinstance(code, int) and code > 0:
        name = errno.errorcode.get(code, "?")
        message = f"{what}: {text} (errno {code} {name}: {os.strerror(code)})"
        if code == errno.ENOMEM and "MR" in text:
            message += "; is the locked-memory limit (ulimit -l) large enough?"
        if code in (errno.EPERM, errno.EACCES):
            return from_code(Code.PERMISSION_DENIED, message)
        return _BY_ERRNO.get(code, InternalError)(message)
    if pv is not None and isinstance(exc, pv.pyverbs_error.PyverbsUserError):
        return InvalidArgumentError(f"{what}: {text}")
    return InternalError(f"{what}: {text}")


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a block of pyverbs calls; its pyverbs exceptions leave as tensorverbs errors."""
    pv = load()
    try:
        yield
    except pv.pyverbs_error.PyverbsError as exc:
        raise convert(exc, what) from exc
