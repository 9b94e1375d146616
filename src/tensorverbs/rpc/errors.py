"""gRPC status <-> tensorverbs errors."""
from __future__ import annotations

import grpc

from ..errors import Code, TensorverbsError, UnauthenticatedError, UnavailableError, from_code
from .options import SERVICE_ERROR
from .tls import handshake_failure


def from_rpc_error(exc: grpc.RpcError, peer: str) -> TensorverbsError:
    """The tensorverbs error of a failed call to ``peer`` (its code kept, peer named; a
    failed TLS handshake is UNAUTHENTICATED)."""
    code = exc.code()
    details = exc.details() or code.name
    number = code.value[0]
    if number == Code.UNAVAILABLE:
        why = handshake_failure(details)
        if why is not None:
            return UnauthenticatedError(f"{peer}: {why}")
        return UnavailableError(f"{peer} is unavailable: {details}")
    if number == Code.UNAUTHENTICATED:
        return UnauthenticatedError(f"{peer} refused this task: {details}")
    return from_code(number, f"{peer}: {details}")


def to_status(error: TensorverbsError) -> tuple[grpc.StatusCode, str]:
    """The gRPC status a handler ends with for ``error``."""
    for status in grpc.StatusCode:
        if status.value[0] == error.code:
            return status, error.message
    return grpc.StatusCode.UNKNOWN, error.message


#: the details gRPC gives a call whose operations the core failed: a call made on a
#: connection that is going away (GOAWAY) ends so, with INTERNAL
_CORE_FAILED = "Internal error from Core"


def from_service(trailing_metadata) -> bool:
    """Whether a call's ``trailing_metadata`` says the peer's service ended it (its status
    is the service's error, not gRPC's own)."""
    return tuple(SERVICE_ERROR) in [tuple(item) for item in (trailing_metadata or ())]


def connection_broke(exc: grpc.aio.AioRpcError) -> bool:
    """Whether a call failed because its connection broke (UNAVAILABLE from gRPC itself,
    or its core's failure of a call on a connection going away; neither from the peer's
    service nor a failed TLS handshake): the peer may be reached again."""
    details = exc.details() or ""
    if from_service(exc.trailing_metadata()):
        return False
    if exc.code() == grpc.StatusCode.INTERNAL:
        return details == _CORE_FAILED
    return exc.code() == grpc.StatusCode.UNAVAILABLE and handshake_failure(details) is None
