"""The job token: every call of the tensorverbs service proves with it which task of the
job makes it, and a server refuses a call without a valid proof (UNAUTHENTICATED) before
any handler runs or any request is parsed.

The token is ``Server(token=...)``, else ``TENSORVERBS_TOKEN``, else the contents of the
file ``TENSORVERBS_TOKEN_FILE`` names. A call carries the calling task's name and its
proof, an HMAC-SHA256 of the name keyed with the token (the token itself never leaves the
process): a server that holds the token checks the proof in constant time and then knows
which task calls (:func:`caller`), so that a call acting for a task is refused unless that
task makes it. The standard health service stays open, for orchestrators' probes.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import os
from typing import Any, Awaitable, Callable, Mapping, Sequence

import grpc

from ..errors import InvalidArgumentError
from .options import SERVICE

#: the metadata key of the calling task's proof (gRPC keys are lower case)
HEADER = "tensorverbs-token"
#: the metadata key of the calling task's name
TASK_HEADER = "tensorverbs-task"
#: a refused call's status message
REFUSED = "the call carries no valid job token (only the tasks of its job are served)"
#: what a proof's HMAC covers beside the task's name (a proof is good for nothing else)
_PROOF_CONTEXT = b"tensorverbs task proof v1\0"
#: what a name derived from the token covers beside its purpose
_NAME_CONTEXT = b"tensorverbs derived name v1\0"
#: the longest task name a proof is checked for (longer ones are refused unhashed)
_MAX_TASK = 1024


class JobToken:
    """A job's shared secret; its repr does not show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        value = value.strip()
        if not value or not all(" " <= c <= "~" for c in value):
            raise InvalidArgumentError("the job token must be non-empty printable ASCII")
        self._value = value

    @classmethod
    def resolve(cls, token: str | None = None,
                environ: Mapping[str, str] | None = None) -> "JobToken | None":
        """``token``, else TENSORVERBS_TOKEN, else TENSORVERBS_TOKEN_FILE's contents; None
        when none is given (the service is then open)."""
        env = os.environ if environ is None else environ
        if token is None:
            token = env.get("TENSORVERBS_TOKEN") or None
        if token is None and env.get("TENSORVERBS_TOKEN_FILE"):
            path = env["TENSORVERBS_TOKEN_FILE"]
            try:
                with open(path, encoding="ascii") as f:
                    token = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidArgumentError(
                    f"TENSORVERBS_TOKEN_FILE={path!r} cannot be read: {type(exc).__name__}") from None
        return None if token is None else cls(token)

    def proof(self, task: str) -> str:
        """What proves that a call comes from ``task`` (a task of this job)."""
        return _proof(self._value, task)

    def derive(self, purpose: str) -> str:
        """A name for ``purpose`` that only holders of the token can make (hex)."""
        return hmac.new(self._value.encode(), _NAME_CONTEXT + purpose.encode(), hashlib.sha256).hexdigest()

    def metadata(self, task: str) -> tuple[tuple[str, str], ...]:
        """The call metadata of a call by ``task``: its name and its proof."""
        return ((TASK_HEADER, task), (HEADER, self.proof(task)))

    def caller(self, metadata: Sequence[Any] | None) -> str | None:
        """The task whose valid proof call ``metadata`` carries (exactly one name and one
        proof, checked in constant time), else None."""
        names = [value for key, value in metadata or () if key == TASK_HEADER]
        proofs = [value for key, value in metadata or () if key == HEADER]
        if len(names) != 1 or len(proofs) != 1 or not isinstance(names[0], str) or len(names[0]) > _MAX_TASK:
            return None
        presented = proofs[0].encode() if isinstance(proofs[0], str) else proofs[0]
        return names[0] if hmac.compare_digest(presented, self.proof(names[0]).encode()) else None

    def __repr__(self) -> str:
        return "JobToken(<hidden>)"


@functools.lru_cache(maxsize=4096)
def _proof(token: str, task: str) -> str:
    """The HMAC of ``task`` keyed with ``token``, once per pair: a server checks every call
    (the interceptor, then the handler that acts for a task) with what it computed before."""
    return hmac.new(token.encode(), _PROOF_CONTEXT + task.encode(), hashlib.sha256).hexdigest()


def authorize(multicallable: Callable[..., Any], token: JobToken | None, task: str) -> Callable[..., Any]:
    """``multicallable`` with ``task``'s proof of ``token`` in every call's metadata (itself
    without a token)."""
    if token is None:
        return multicallable
    metadata = token.metadata(task)

    def call(*args: Any, **kwargs: Any) -> Any:
        return multicallable(*args, metadata=metadata, **kwargs)
    return call


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)


# (request streaming, response streaming) -> a handler that refuses the call unread
_REFUSALS = {
    (False, False): grpc.unary_unary_rpc_method_handler(_refuse),
    (False, True): grpc.unary_stream_rpc_method_handler(_refuse),
    (True, False): grpc.stream_unary_rpc_method_handler(_refuse),
    (True, True): grpc.stream_stream_rpc_method_handler(_refuse),
}


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call of the tensorverbs service that does not carry ``token``."""

    def __init__(self, token: JobToken) -> None:
        self._token = token
        self._prefix = f"/{SERVICE}/"

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if (handler is None or not details.method.startswith(self._prefix)
                or self._token.caller(details.invocation_metadata) is not None):
            return handler
        return _REFUSALS[(handler.request_streaming, handler.response_streaming)]
