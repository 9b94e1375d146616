"""The gRPC server of a task: GetStatus, GetRemoteAddress, RecvTensor, SettleRecvTensors,
ReleaseSharedTensor, GetRemoteAccess, GetHeldTensors and grpc.health.v1 (its watches
capped, :mod:`.health`).

RecvTensor is the sender side of the "grpc" data path: it matches the request against
the local table (waiting if the tensor is not sent yet) and streams the tensor back; one
receiver may have at most MAX_WAITING_CALLS calls waiting here. A tensor on its way is
held until its receiver's word on the call (:mod:`.confirmations`).
GetRemoteAddress is answered by the verbs protocol when the task runs "grpc+verbs";
GetRemoteAccess by the task's one-sided buffers (:mod:`tensorverbs.one_sided`); the gRPC
layer knows nothing of verbs beyond those messages. With a job token, a call without it
never reaches these handlers (:mod:`.auth`): nobody outside the job can take a tensor,
set up (or replace) a verbs channel, reach a registered buffer or learn the task's
incarnation.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, NoReturn

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..errors import (
    CancelledError, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
    ResourceExhaustedError, TensorverbsError, UnavailableError, as_error,
)
from ..ports import bind_failure
from ..rendezvous.key import parse_key
from . import tensorverbs_pb2 as pb
from .auth import JobToken, TokenInterceptor
from .confirmations import Confirmations
from .errors import to_status
from .health import HealthServicer
from .identity import Identity
from .options import RELEASE_BATCH, SERVER_OPTIONS, SERVICE, SERVICE_ERROR
from .tensor_stream import tensor_messages
from .tls import TlsConfig

if TYPE_CHECKING:
    from ..runtime import TaskRuntime

#: the most RecvTensor calls of one receiver that wait here for their tensors (as many as a
#: "grpc+verbs" channel answers at once)
MAX_WAITING_CALLS = 65536
#: the most earlier calls a RecvTensor call may be made again for (retry_of)
MAX_RETRY_OF = 16
#: the most calls one SettleRecvTensors settles (taken and dropped together)
MAX_SETTLED = 2048
#: answers GetRemoteAddress, on the event loop
SetupHandler = Callable[[pb.GetRemoteAddressRequest], Awaitable[pb.GetRemoteAddressResponse]]
#: answers GetRemoteAccess, on the event loop
AccessHandler = Callable[[pb.GetRemoteAccessRequest], Awaitable[pb.GetRemoteAccessResponse]]
#: answers HoldPublication (on the event loop, without blocking)
HoldHandler = Callable[[pb.HoldPublicationRequest], None]
#: what the task holds for a receiver under a name: (receiver, name, step) -> (steps, close names)
HeldHandler = Callable[[str, str, int], tuple[list[int], list[str]]]


class Servicer:
    """The handlers of the tensorverbs service for one task."""

    def __init__(self, rt: "TaskRuntime", setup_handler: SetupHandler | None = None,
                 access_handler: AccessHandler | None = None, held: HeldHandler | None = None,
                 hold_handler: HoldHandler | None = None) -> None:
        self.rt = rt
        self.setup_handler = setup_handler
        self.access_handler = access_handler
        self.hold_handler = hold_handler
        self.held = held
        #: who calls (start_server sets it with the server's token and TLS)
        self.identity = Identity(None, None)
        # (receiver, request id) -> withdraw the RecvTensor call's waiter (on the event loop)
        self._waiting: dict[tuple[str, int], Callable[[], None]] = {}
        self._waiting_of: dict[str, int] = {}  # receiver -> its calls waiting (on the event loop)
        self.confirmations = Confirmations(self._give_back)
        rt.counters.gauge("recv_calls_waiting", lambda: len(self._waiting))
        rt.counters.gauge("tensors_unconfirmed", lambda: len(self.confirmations))

    async def get_status(self, request: pb.GetStatusRequest, context) -> pb.GetStatusResponse:
        return pb.GetStatusResponse(task=str(self.rt.task), incarnation=self.rt.incarnation,
                                    protocol=self.rt.protocol)

    async def get_remote_address(self, request: pb.GetRemoteAddressRequest,
                                 context) -> pb.GetRemoteAddressResponse:
        refused = self.identity.refusal(context, request.host_name, "sets up a verbs channel")
        if refused is not None:
            await _abort(context, refused)
        if self.setup_handler is None:
            await _abort(context, FailedPreconditionError(
                f"{self.rt.task} runs protocol {self.rt.protocol!r}, not 'grpc+verbs': "
                f"{request.host_name} cannot set up a verbs channel to it"))
        try:
            return await self.setup_handler(request)
        except Exception as exc:
            await _abort(context, as_error(exc, f"setting up a verbs channel for {request.host_name}"))

    async def get_remote_access(self, request: pb.GetRemoteAccessRequest,
                                context) -> pb.GetRemoteAccessResponse:
        refused = self.identity.refusal(context, request.host_name, "asks for one-sided access")
        if refused is not None:
            await _abort(context, refused)
        if self.access_handler is None:
            await _abort(context, FailedPreconditionError(f"{self.rt.task} has no registered buffers"))
        try:
            return await self.access_handler(request)
        except Exception as exc:
            await _abort(context, as_error(exc, f"giving {request.host_name} one-sided access"))

    async def hold_publication(self, request: pb.HoldPublicationRequest, context) -> pb.HoldPublicationResponse:
        refused = self.identity.refusal(context, request.host_name, "holds a publication")
        if refused is not None:
            await _abort(context, refused)
        if self.hold_handler is None:
            await _abort(context, NotFoundError(f"{self.rt.task} publishes nothing"))
        try:
            self.hold_handler(request)
        except Exception as exc:
            await _abort(context, as_error(exc, f"holding a publication for {request.host_name}"))
        return pb.HoldPublicationResponse()

    async def serve_relayed(self, request: pb.ServeRelayedRequest, context) -> pb.ServeRelayedResponse:
        refused = self.identity.refusal(context, request.host_name, "asks for a relayed tensor to be served")
        if refused is not None:
            await _abort(context, refused)
        try:
            served = await asyncio.get_running_loop().run_in_executor(  # (it copies the tensor)
                None, self.rt.relays.serve, request.host_name, request.tag, request.receiver)
        except Exception as exc:
            await _abort(context, as_error(exc, f"serving a relayed tensor for {request.host_name}"))
        return pb.ServeRelayedResponse(served=served)

    async def get_held_tensors(self, request: pb.GetHeldTensorsRequest, context) -> pb.GetHeldTensorsResponse:
        if self.held is None:
            return pb.GetHeldTensorsResponse()
        steps, names = self.held(request.receiver, request.name, request.step_id)
        return pb.GetHeldTensorsResponse(steps=steps, names=names)

    async def recv_tensor(self, requests: AsyncIterator[pb.RecvTensorRequest],
                          context) -> AsyncIterator[bytes]:
        calls = requests.__aiter__()
        try:
            request = await calls.__anext__()
        except StopAsyncIteration:
            return
        try:
            key = parse_key(request.rendezvous_key)
        except InvalidArgumentError as exc:
            await _abort(context, exc)
        receiver = str(key.dst)
        waiting = (receiver, request.request_id)
        error = (self.identity.refusal(context, receiver, f"takes the tensor {key.name!r}")
                 or self.check_request(key.src, key.src_incarnation) or self.check_protocol(key.dst))
        if error is None and self._waiting_of.get(receiver, 0) >= MAX_WAITING_CALLS:
            error = ResourceExhaustedError(f"{receiver} has {MAX_WAITING_CALLS} RecvTensor calls waiting at "
                                           f"{self.rt.task} already, the most a receiver may have")
        if error is None and len(request.retry_of) > MAX_RETRY_OF:
            error = InvalidArgumentError(f"a RecvTensor call made again for {len(request.retry_of)} earlier "
                                         f"calls: at most {MAX_RETRY_OF}")
        if error is None and self.confirmations.in_use(*waiting):
            error = InvalidArgumentError(f"{receiver} has a RecvTensor call {request.request_id} at "
                                         f"{self.rt.task} already")
        if error is not None:
            await _abort(context, error)
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future = loop.create_future()
        table, step_id = self.rt.table, request.step_id
        # (tensors held for this receiver that it lacks go back first, for this call to find)
        if not self.confirmations.begin(receiver, request.request_id, request.receiver_incarnation,
                                        request.retry_of):
            await _abort(context, UnavailableError(f"{receiver} restarted: a call of its incarnation "
                                                   f"{request.receiver_incarnation:016x} came late"))

        def deliver(err, value) -> None:  # on the loop; the requester may be gone already
            if not arrived.done():
                arrived.set_exception(err) if err else arrived.set_result(value)
            elif value is not None:
                table.requeue(step_id, key, value)

        waiter = table.recv_async(step_id, key, lambda err, value: loop.call_soon_threadsafe(deliver, err, value))

        def withdraw() -> None:
            if waiter is None or waiter.cancel():
                deliver(CancelledError("withdrawn by its receiver"), None)

        self._waiting[waiting] = withdraw
        self._waiting_of[receiver] = self._waiting_of.get(receiver, 0) + 1
        value, counted, nbytes, held = None, 0, 0, False
        try:
            try:
                value = await arrived
            finally:
                self._stop_waiting(waiting)
            nbytes, messages = tensor_messages(value)
            counted = self._count_sent(1, nbytes)  # before the receiver can see it
            if not self.confirmations.hold(receiver, request.request_id, step_id, key, value, nbytes):
                raise CancelledError(f"{receiver} ended its call for {key.name!r}, or restarted")
            held, value = True, None  # from its first byte on, the receiver's word decides
            async for message in messages:
                yield message
            confirmed = await calls.__anext__()
            if not confirmed.received:
                raise InternalError(f"the receiver of {key.name!r} sent a second request")
            self.confirmations.confirm(*waiting)
        except StopAsyncIteration:  # the call ended: its tensor is held for the receiver's word
            pass
        except Exception as exc:  # the call ends with the error: a tensor taken goes back
            self._untake(step_id, key, value, counted, nbytes)
            if held:  # (the receiver learns that it does not have it from the error)
                self.confirmations.drop(*waiting)
            await _abort(context, as_error(exc, f"sending {key.name!r} to {key.dst}"))
        except (asyncio.CancelledError, GeneratorExit):
            # the requester went away: a value taken for it and not on its way goes back to
            # the table (one on its way is held for the receiver's word)
            if not counted and arrived.done() and not arrived.cancelled() and not arrived.exception():
                value = arrived.result()
            if value is not None:
                self._untake(step_id, key, value, counted, nbytes)
            elif not counted and waiter is not None:
                waiter.cancel()
            raise
        finally:
            self._stop_waiting(waiting)
            self.confirmations.end(*waiting)

    def _stop_waiting(self, waiting: tuple[str, int]) -> None:
        """The call ``waiting`` (receiver, request id) no longer waits (idempotent)."""
        if self._waiting.pop(waiting, None) is not None:
            left = self._waiting_of[waiting[0]] - 1
            if left:
                self._waiting_of[waiting[0]] = left
            else:
                del self._waiting_of[waiting[0]]

    def _untake(self, step_id: int, key, value, counted: int, nbytes: int) -> None:
        """A tensor taken for a call, not held (None: none), goes back to the
        table, uncounted if it was ``counted``."""
        if value is not None:
            self._count_sent(-counted, nbytes)
            self.rt.table.requeue(step_id, key, value)

    def _give_back(self, step_id: int, key, value, nbytes: int) -> None:
        """A tensor held for its receiver, which did not take it, goes back to the table."""
        self._untake(step_id, key, value, 1, nbytes)

    def _count_sent(self, sign: int, nbytes: int) -> int:
        """Count a tensor as sent (``sign`` 1) or as back (-1; 0 counts nothing); returns
        ``sign``."""
        self.rt.counters.add("tensors_sent", sign)
        self.rt.counters.add("bytes_sent", sign * nbytes)
        return sign

    async def cancel_recv_tensor(self, request: pb.CancelRecvTensorRequest,
                                 context) -> pb.CancelRecvTensorResponse:
        # a caller withdraws only its own calls (on an open server, whoever claims them)
        callers = self.identity.callers(context)
        if callers is None:
            callers = {dst for dst, request_id in self._waiting if request_id == request.request_id}
        for caller in callers:
            withdraw = self._waiting.pop((caller, request.request_id), None)
            if withdraw is not None:
                withdraw()
        return pb.CancelRecvTensorResponse()

    async def settle_recv_tensors(self, request: pb.SettleRecvTensorsRequest,
                                  context) -> pb.SettleRecvTensorsResponse:
        if len(request.taken) + len(request.dropped) > MAX_SETTLED:
            await _abort(context, InvalidArgumentError(
                f"SettleRecvTensors of {len(request.taken) + len(request.dropped)} calls: at most {MAX_SETTLED}"))
        # a caller settles only its own calls (on an open server, whoever claims them)
        callers = self.identity.callers(context)
        claimed = (self.confirmations.receivers_of([*request.taken, *request.dropped]) if callers is None
                   else None)
        for ids, settle in ((request.taken, self.confirmations.confirm), (request.dropped, self.confirmations.drop)):
            for request_id in ids:
                for caller in callers if claimed is None else claimed.get(request_id, ()):
                    settle(caller, request_id)
        return pb.SettleRecvTensorsResponse()

    async def release_shared_tensor(self, request: pb.ReleaseSharedTensorRequest,
                                    context) -> pb.ReleaseSharedTensorResponse:
        if len(request.export_ids) > RELEASE_BATCH:
            await _abort(context, InvalidArgumentError(f"ReleaseSharedTensor of {len(request.export_ids)} "
                                                       f"exports: at most {RELEASE_BATCH} a call"))
        refused = self.rt.shared.release(request.incarnation, request.export_ids,
                                         self.identity.callers(context))
        if refused is not None:
            await _abort(context, refused)
        return pb.ReleaseSharedTensorResponse()

    def check_request(self, src, incarnation: int) -> TensorverbsError | None:
        """Why a request for a tensor of ``src`` at ``incarnation`` cannot be served here."""
        if src != self.rt.task:
            return InvalidArgumentError(f"request for a tensor of {src} reached {self.rt.task}")
        if incarnation not in (0, self.rt.incarnation):
            return UnavailableError(
                f"{self.rt.task} restarted: request for incarnation {incarnation:016x}, "
                f"this is {self.rt.incarnation:016x}")
        return None

    def check_protocol(self, requester) -> TensorverbsError | None:
        """Why a RecvTensor call (of a "grpc" task, ``requester``) cannot be served here: this
        task runs another protocol, whose sends never reach the table the call waits on."""
        if self.rt.protocol == "grpc":
            return None
        return FailedPreconditionError(f"{self.rt.task} runs {self.rt.protocol}, {requester} grpc: every "
                                       "task of a cluster must run the same protocol")

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {
            "GetStatus": grpc.unary_unary_rpc_method_handler(
                self.get_status, request_deserializer=pb.GetStatusRequest.FromString,
                response_serializer=pb.GetStatusResponse.SerializeToString),
            "GetRemoteAddress": grpc.unary_unary_rpc_method_handler(
                self.get_remote_address,
                request_deserializer=pb.GetRemoteAddressRequest.FromString,
                response_serializer=pb.GetRemoteAddressResponse.SerializeToString),
            "RecvTensor": grpc.stream_stream_rpc_method_handler(
                self.recv_tensor, request_deserializer=pb.RecvTensorRequest.FromString,
                response_serializer=None),
            "CancelRecvTensor": grpc.unary_unary_rpc_method_handler(
                self.cancel_recv_tensor, request_deserializer=pb.CancelRecvTensorRequest.FromString,
                response_serializer=pb.CancelRecvTensorResponse.SerializeToString),
            "SettleRecvTensors": grpc.unary_unary_rpc_method_handler(
                self.settle_recv_tensors, request_deserializer=pb.SettleRecvTensorsRequest.FromString,
                response_serializer=pb.SettleRecvTensorsResponse.SerializeToString),
            "ReleaseSharedTensor": grpc.unary_unary_rpc_method_handler(
                self.release_shared_tensor,
                request_deserializer=pb.ReleaseSharedTensorRequest.FromString,
                response_serializer=pb.ReleaseSharedTensorResponse.SerializeToString),
            "GetHeldTensors": grpc.unary_unary_rpc_method_handler(
                self.get_held_tensors, request_deserializer=pb.GetHeldTensorsRequest.FromString,
                response_serializer=pb.GetHeldTensorsResponse.SerializeToString),
            "HoldPublication": grpc.unary_unary_rpc_method_handler(
                self.hold_publication, request_deserializer=pb.HoldPublicationRequest.FromString,
                response_serializer=pb.HoldPublicationResponse.SerializeToString),
            "ServeRelayed": grpc.unary_unary_rpc_method_handler(
                self.serve_relayed, request_deserializer=pb.ServeRelayedRequest.FromString,
                response_serializer=pb.ServeRelayedResponse.SerializeToString),
            "GetRemoteAccess": grpc.unary_unary_rpc_method_handler(
                self.get_remote_access,
                request_deserializer=pb.GetRemoteAccessRequest.FromString,
                response_serializer=pb.GetRemoteAccessResponse.SerializeToString),
        })


async def _abort(context, error: TensorverbsError) -> NoReturn:
    code, message = to_status(error)
    await context.abort(code, message, trailing_metadata=(SERVICE_ERROR,))
    raise AssertionError("context.abort returned")  # it raises


def _cannot_listen(bind: str, grpc_says: str, tls: TlsConfig | None) -> UnavailableError:
    """The error of a server that could not bind ``bind``: why a socket cannot bind it now
    (gRPC's own error does not say), else what gRPC said."""
    why = bind_failure(bind)
    if why is None:
        why = grpc_says + ("" if tls is None else " (or the TLS certificate and key are invalid or do not match)")
    return UnavailableError(f"cannot listen on {bind}: {why}")


async def start_server(servicer: Servicer, bind: str, token: JobToken | None = None,
                       tls: TlsConfig | None = None) -> tuple[grpc.aio.Server, int]:
    """Serve ``servicer`` and the health service on ``bind`` (host:port, port 0 for a free
    one): over TLS with ``tls``, and refusing the service's calls that do not carry
    ``token`` (either may be None). Returns the server and the port it listens on."""
    credentials = tls.server_credentials() if tls is not None else None
    server = grpc.aio.server(options=SERVER_OPTIONS,
                             interceptors=[TokenInterceptor(token)] if token is not None else None)
    servicer.identity = Identity(token, tls)
    server.add_generic_rpc_handlers((servicer.handler(),))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    try:
        port = (server.add_insecure_port(bind) if credentials is None
                else server.add_secure_port(bind, credentials))
    except RuntimeError as exc:
        raise _cannot_listen(bind, str(exc), tls) from None
    if port == 0:
        raise _cannot_listen(bind, "address in use or not local", tls)
    await server.start()
    await health.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, port
