"""Which task makes a call to this task's service, and the refusal of a call made for
another task.

A call's maker is the task its certificate names under mutual TLS (``tensorverbs certs``
issues each task a certificate whose common name is the task), and the task whose proof
of the job token it carries (:mod:`.auth`); where both are given they must agree. An open
server (neither a token nor mutual TLS), or one under mutual TLS whose certificates are
not named after tasks, knows nobody: it takes every caller's word.
"""
from __future__ import annotations

from typing import Any

from ..cluster import parse_task
from ..errors import PermissionDeniedError, TensorverbsError
from .auth import JobToken
from .tls import TlsConfig


class Identity:
    """How this task's server learns who calls it."""

    def __init__(self, token: JobToken | None, tls: TlsConfig | None) -> None:
        self._token = token
        self._mutual = tls is not None and tls.ca is not None

    def callers(self, context: Any) -> set[str] | None:
        """The tasks the call proves it comes from (one where the proofs agree, two where
        they do not); None where it proves none and the server takes the caller's word:
        an open server, or mutual TLS with certificates not named after tasks (another
        PKI's) and no token."""
        found: set[str] = set()
        if self._mutual:  # (a certificate not named after a task names none)
            found.update(name for name in (raw.decode(errors="replace") for raw in
                                           context.auth_context().get("x509_common_name", ()))
                         if _is_task(name))
        if self._token is not None:
            task = self._token.caller(context.invocation_metadata())
            found.add(task if task is not None else "")  # ("": no proof; the interceptor refuses it)
        return found or None

    def refusal(self, context: Any, claimed: str, what: str) -> PermissionDeniedError | None:
        """Why the call, which ``what`` (e.g. "takes the tensor 'w'") for ``claimed``,
        is refused; None when ``claimed`` makes it (or nobody is known)."""
        callers = self.callers(context)
        if callers is None or callers == {claimed}:
            return None
        return PermissionDeniedError.acting_for(callers, what, claimed)


def _is_task(name: str) -> bool:
    """Whether ``name`` is a task's name (/job:J/replica:0/task:N)."""
    try:
        parse_task(name)
    except (TensorverbsError, ValueError):
        return False
    return True
