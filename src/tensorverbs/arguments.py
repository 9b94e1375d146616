"""Checks of what callers pass the public API: an argument of a wrong type or value is
the caller's mistake, an InvalidArgumentError naming the argument."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from .errors import InvalidArgumentError

T = TypeVar("T")


def _refuse(name: str, expected: str, value: Any) -> InvalidArgumentError:
    return InvalidArgumentError(f"{name} must be {expected}, not {type(value).__name__} {value!r}")


def integer(value: Any, name: str, minimum: int | None = None) -> int:
    """``value`` as an int (any integral number; not a bool), at least ``minimum``."""
    if type(value) is int and minimum is None:  # the common call, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _refuse(name, "an integer", value)
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{name} is {value}: expected {minimum} or more")
    return int(value)


#: the longest number of seconds taken (about 31 years): what a thread's wait and the
#: native core's deadlines (nanoseconds of the monotonic clock) can hold, with room to spare
LONGEST_SECONDS = 10**9


def seconds(value: Any, name: str) -> float:
    """``value`` as a number of seconds (a real number from 0 to LONGEST_SECONDS)."""
    if (type(value) is int or type(value) is float) and 0 <= value <= LONGEST_SECONDS:  # the common call
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:  # (NaN)
        raise _refuse(name, "a number of seconds", value)
    if value < 0:
        raise InvalidArgumentError(f"{name} is {value}: expected 0 or more seconds")
    if value > LONGEST_SECONDS:  # type: ignore[operator]  # (typeshed's Real takes no int here)
        raise InvalidArgumentError(f"{name} is {value}: expected at most {LONGEST_SECONDS:.0e} seconds")
    return float(value)


def optional_seconds(value: Any, name: str) -> float | None:
    """None (no limit), or :func:`seconds` of ``value``."""
    return None if value is None else seconds(value, name)


def text(value: Any, name: str) -> str:
    """``value``, a str."""
    if not isinstance(value, str):
        raise _refuse(name, "a str", value)
    return value


def optional_text(value: Any, name: str) -> str | None:
    """None, or ``value``, a str."""
    return None if value is None else text(value, name)


def sequence(value: Any, name: str, expected: str = "a list") -> list[Any]:
    """``value``, a list, tuple or other sequence (not a str or bytes), as a list."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _refuse(name, expected, value)
    return list(value)


def flag(value: Any, name: str) -> bool:
    """``value`` as a bool (a bool or numpy bool)."""
    if not isinstance(value, (bool, np.bool_)):
        raise _refuse(name, "a bool", value)
    return bool(value)


def optional_flag(value: Any, name: str) -> bool | None:
    """None, or :func:`flag` of ``value``."""
    return None if value is None else flag(value, name)


def instance(value: Any, cls: type[T], name: str) -> T:
    """``value``, an instance of ``cls``."""
    if not isinstance(value, cls):
        raise _refuse(name, f"a {cls.__name__}", value)
    return value


def optional_instance(value: Any, cls: type[T], name: str) -> T | None:
    """None, or ``value``, an instance of ``cls``."""
    return None if value is None else instance(value, cls, name)


def environ(value: Any, name: str = "environ") -> Mapping[str, str] | None:
    """None (the process's environment), or a mapping of variables."""
    if value is not None and not isinstance(value, Mapping):
        raise _refuse(name, "a mapping of environment variables", value)
    return value


def shape(value: Any, name: str = "shape") -> tuple[int, ...]:
    """A tensor shape: an int, or a sequence of ints (each 0 or more)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise _refuse(name, "an int or a sequence of ints", value)
    return tuple(integer(d, f"{name} entry", 0) for d in value)
