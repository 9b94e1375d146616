"""A hand-written grpc+verbs peer for protocol tests: it speaks the control plane (GetStatus,
GetRemoteAddress, health) and moves raw bytes over a queue pair of the native core's soft
provider, so a test can send a real server malformed, mutated or lying messages and watch
what it answers."""
from __future__ import annotations

import secrets
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tensorverbs import _core
from tensorverbs.cluster import TaskName
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import CHANNEL_OPTIONS, SERVER_OPTIONS, SERVICE, method
from tensorverbs.tensor import TensorMeta

SLOTS = 16
SLOT = _core.SLOT_BYTES
TIMEOUT = 20.0
MessageType = _core.MessageType


@dataclass
class Message:
    """A control message, as the tests build and read them."""

    type: MessageType
    request_index: int
    name: str = ""
    step_id: int = 0
    remote_addr: int = 0
    rkey: int = 0
    meta: TensorMeta | None = None
    error_code: int = 0
    error_message: str = ""
    payload: bytes = b""
    acked: int = field(default=0, compare=False)

    def encode(self) -> bytes:
        meta = self.meta and (self.meta.dtype, list(self.meta.shape), self.meta.is_dead, self.meta.nbytes)
        return _core.encode_message(int(self.type), self.request_index, self.name, self.step_id,
                                    self.remote_addr, self.rkey, meta, self.error_code,
                                    self.error_message, self.acked, self.payload)

    @classmethod
    def decode(cls, data: bytes) -> "Message":
        got = _core.decode_message(data)
        assert got["error"] is None, got["error"]
        meta = got["meta"] and TensorMeta(got["meta"][0], tuple(got["meta"][1]), *got["meta"][2:])
        return cls(MessageType(got["type"]), got["request_index"], got["name"], got["step_id"],
                   got["remote_addr"], got["rkey"], meta, got["error_code"], got["error_message"],
                   got["payload"], got["acked"])


class RoguePeer:
    """Pretends to be ``task`` (listening at ``address``) of a grpc+verbs cluster."""

    def __init__(self, task: TaskName, address: str) -> None:
        self.task, self.incarnation = task, secrets.randbits(63) | 1
        self.ctx = _core.open_context("soft", address.rsplit(":", 1)[0])
        self.pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(4096)
        size = SLOTS * SLOT + 8
        self.tx = self.pd.allocate_memory(size, _core.LOCAL_WRITE)
        self.rx = self.pd.allocate_memory(size, _core.LOCAL_WRITE | _core.REMOTE_WRITE)
        self.data = self.pd.allocate_memory(8 << 20, _core.LOCAL_WRITE | _core.REMOTE_WRITE | _core.REMOTE_READ)
        self.qp = None
        self.mangle_endpoint: Callable[[bytes], bytes] = lambda endpoint: endpoint
        self.max_message_bytes = 1 << 30  # the largest operation it says it takes
        self.connected = threading.Event()
        self.remote_rx = (0, 0)
        self._sent = self._received = self._taken_by_peer = 0
        self._pending: list = []
        self._inbox: list = []  # messages that arrived while a write waited for its credit
        self.server = grpc.server(futures.ThreadPoolExecutor(4), options=SERVER_OPTIONS)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
            "GetStatus": grpc.unary_unary_rpc_method_handler(
                lambda r, c: pb.GetStatusResponse(task=str(task), incarnation=self.incarnation,
                                                  protocol="grpc+verbs"),
                request_deserializer=pb.GetStatusRequest.FromString,
                response_serializer=pb.GetStatusResponse.SerializeToString),
            "GetRemoteAddress": grpc.unary_unary_rpc_method_handler(
                self._get_remote_address, request_deserializer=pb.GetRemoteAddressRequest.FromString,
                response_serializer=pb.GetRemoteAddressResponse.SerializeToString),
        }),))
        servicer = health.HealthServicer()
        servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, self.server)
        self.server.add_insecure_port(address)
        self.server.start()

    # -- channel setup ----------------------------------------------------------------------
    def _new_qp(self) -> None:
        self.qp = self.ctx.create_qp(self.pd, self.cq, self.cq)
        self.qp.post_recv(list(range(1024)))
        self._sent = self._received = self._taken_by_peer = 0
        self._inbox = []  # (_pending keeps its list: a waiter on the old queue pair may be using it)

    def _describe(self) -> dict:
        description = _core.describe_channel("soft", self.mangle_endpoint(self.qp.endpoint), self.rx.addr,
                                             self.rx.rkey, self.rx.length, SLOTS, self.max_message_bytes)
        return dict(host_name=str(self.task), incarnation=self.incarnation,
                    channel=pb.Channel(provider="soft", provider_info=description))

    def _accept(self, message) -> None:
        remote = _core.parse_channel(message.channel.provider_info)
        self.qp.connect(remote["endpoint"])
        self.remote_rx = (remote["rx_addr"], remote["rx_rkey"])
        self.connected.set()

    def _get_remote_address(self, request, context):
        self._new_qp()
        self._accept(request)
        return pb.GetRemoteAddressResponse(**self._describe())

    def connect_to(self, address: str) -> None:
        """Set a channel up with the server at ``address`` (a fresh queue pair each time)."""
        self._new_qp()
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            call = channel.unary_unary(method("GetRemoteAddress"),
                                       request_serializer=pb.GetRemoteAddressRequest.SerializeToString,
                                       response_deserializer=pb.GetRemoteAddressResponse.FromString)
            self._accept(call(pb.GetRemoteAddressRequest(**self._describe()), timeout=TIMEOUT))

    # -- raw traffic ------------------------------------------------------------------------
    def _wait(self, want, timeout: float = TIMEOUT, qp_num: int | None = None):
        """The first completion satisfying ``want`` (others are kept for later calls): of
        queue pair ``qp_num``, or of the current one (the server may set a new one up)."""
        def mine(wc) -> bool:
            return wc.qp_num == (self.qp.qp_num if qp_num is None else qp_num)
        deadline = time.monotonic() + timeout
        while True:
            for wc in self._pending:
                if mine(wc) and want(wc):
                    self._pending.remove(wc)
                    return wc
            if time.monotonic() > deadline:
                raise TimeoutError("no such completion")
            for wc in self.cq.wait(64, 200):
                current = wc.qp_num == self.qp.qp_num
                if not current and not mine(wc):
                    continue  # left over from a queue pair the server dropped
                if current and wc.ok and wc.has_imm:
                    self.qp.post_recv([wc.wr_id])
                    if wc.imm == _core.IMM_ACK:
                        word = memoryview(self.rx.buffer)[SLOTS * SLOT:SLOTS * SLOT + 4]
                        self._taken_by_peer = int.from_bytes(word, "little")
                if wc.ok and not wc.has_imm and wc.opcode < 128 and wc.wr_id == 0:
                    continue  # our own unremarkable writes completed
                self._pending.append(wc)

    def broken(self, timeout: float = TIMEOUT) -> bool:
        """Whether the queue pair failed (the server dropped the channel)."""
        try:
            self._wait(lambda wc: not wc.ok, timeout)
            return True
        except TimeoutError:
            return False

    def write_raw(self, data: bytes) -> bool:
        """Write ``data`` as the next message; True once the server took it (its credit
        came back), False if the queue pair failed."""
        self.write_raw_batch([data])
        sent = self._sent
        while self._taken_by_peer < sent:
            wc = self._wait(lambda wc: not wc.ok or wc.imm in (_core.IMM_ACK, _core.IMM_MESSAGE))
            if not wc.ok:
                return False
            if wc.imm == _core.IMM_MESSAGE:  # kept for receive(); its credits count now
                self._inbox.append(self._take(wc))
        return True

    def write_raw_batch(self, messages: list[bytes]) -> None:
        """Write ``messages`` as the next ones, posted together (they arrive together)."""
        addr, rkey = self.remote_rx
        wrs = []
        view = memoryview(self.tx.buffer)
        for data in messages:
            slot = self._sent % SLOTS
            self._sent += 1
            view[slot * SLOT:slot * SLOT + len(data)] = data
            wrs.append(self._wr(_core.WR_RDMA_WRITE_WITH_IMM, self.tx.addr + slot * SLOT, len(data),
                                self.tx.lkey, addr + slot * SLOT, rkey, _core.IMM_MESSAGE))
        self.qp.post_send(wrs)

    @staticmethod
    def _wr(opcode: int, local: int, length: int, lkey: int, remote: int, rkey: int, imm: int = 0,
            signaled: bool = False, wr_id: int = 0) -> "_core.SendWR":
        wr = _core.SendWR()
        wr.wr_id, wr.opcode, wr.addr, wr.length, wr.lkey = wr_id, opcode, local, length, lkey
        wr.remote_addr, wr.rkey, wr.imm, wr.signaled = remote, rkey, imm, signaled
        return wr

    def send(self, msg: Message) -> bool:
        msg.acked = self._received
        return self.write_raw(msg.encode())

    def _take(self, wc) -> Message:
        """The message of completion ``wc`` (taken: its credit goes back with our next one)."""
        slot = self._received % SLOTS
        msg = Message.decode(bytes(memoryview(self.rx.buffer)[slot * SLOT:slot * SLOT + wc.byte_len]))
        self._received += 1
        self._taken_by_peer = max(self._taken_by_peer, msg.acked)
        # the credit back at once, as an explicit ACK (the count into the peer's ACK word)
        word = SLOTS * SLOT
        memoryview(self.tx.buffer)[word:word + 4] = self._received.to_bytes(4, "little")
        addr, rkey = self.remote_rx
        self.qp.post_send([self._wr(_core.WR_RDMA_WRITE_WITH_IMM, self.tx.addr + word, 4, self.tx.lkey,
                                    addr + word, rkey, _core.IMM_ACK)])
        return msg

    def receive(self, timeout: float = TIMEOUT) -> Message:
        """The server's next message."""
        if self._inbox:
            return self._inbox.pop(0)
        return self._take(self._wait(lambda wc: wc.ok and wc.has_imm and wc.imm == _core.IMM_MESSAGE, timeout))

    def write_tensor(self, payload: bytes, remote_addr: int, rkey: int, imm: int) -> None:
        """Write ``payload`` to the server's landing with immediate ``imm``."""
        memoryview(self.data.buffer)[:len(payload)] = payload
        self.qp.post_send([self._wr(_core.WR_RDMA_WRITE_WITH_IMM, self.data.addr, len(payload),
                                    self.data.lkey, remote_addr, rkey, imm)])

    def write_plain(self, payload: bytes, remote_addr: int, rkey: int):
        """Write ``payload`` to the server's memory (no immediate); its completion."""
        memoryview(self.data.buffer)[:len(payload)] = payload
        qp = self.qp  # the server may set a new channel up meanwhile (its completion is this one's)
        qp.post_send([self._wr(_core.WR_RDMA_WRITE, self.data.addr, len(payload), self.data.lkey,
                               remote_addr, rkey, signaled=True, wr_id=7)])
        return self._wait(lambda wc: wc.wr_id == 7 and wc.opcode < 128, qp_num=qp.qp_num)  # (not receive 7)

    def close(self) -> None:
        self.server.stop(0)
