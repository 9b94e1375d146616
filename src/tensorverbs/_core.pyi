"""tensorverbs' native core"""

from collections.abc import Sequence
import enum
from typing import Annotated

import numpy
from numpy.typing import NDArray


def build_info() -> dict:
    """
    How the core was built: compiler, cxx_standard, build_type, sanitizers, ibverbs (whether the ibverbs provider is built) and ibverbs_reason.
    """

def encode_message(type: int, request_index: int, name: str = '', step_id: int = 0, remote_addr: int = 0, rkey: int = 0, meta: tuple[int, Sequence[int], bool, int] | None = None, error_code: int = 0, error_message: str = '', acked: int = 0, payload: bytes = ..., requests: Sequence[tuple[int, int, str]] = [], inlines: Sequence[tuple[int, tuple[int, Sequence[int], bool, int], bytes]] = []) -> bytes:
    """
    The bytes of one control message (meta: (dtype, shape, is_dead, nbytes); requests: TENSOR_REQUESTS' (index, step_id, name) each; inlines: TENSOR_INLINES' (index, meta, bytes) each); ValueError if it cannot be encoded. For tests.
    """

class MessageType(enum.IntEnum):
    """The control messages' types."""

    META_DATA_RESPONSE = 0

    TENSOR_RE_REQUEST = 1

    TENSOR_REQUEST = 2

    ERROR_STATUS = 3

    RELEASE = 4

    CANCEL = 5

    TENSOR_INLINE = 6

    TENSOR_REQUESTS = 7

    TENSOR_INLINES = 8

SLOT_BYTES: int = 8192

HEADER_BYTES: int = 821

MAX_TAIL_BYTES: int = 7371

MAX_REQUEST_INDEX: int = 4294967293

IMM_MESSAGE: int = 4294967295

IMM_ACK: int = 4294967294

LOCAL_WRITE: int = 1

REMOTE_WRITE: int = 2

REMOTE_READ: int = 4

WR_RDMA_WRITE: int = 0

WR_RDMA_WRITE_WITH_IMM: int = 1

WR_RDMA_READ: int = 4

ROW_WINDOW_END: int = 9223372036854775808

def describe_channel(provider: str, endpoint: bytes, rx_addr: int, rx_rkey: int, rx_length: int, slots: int, max_message_bytes: int) -> bytes:
    """A channel description's bytes (as GetRemoteAddress carries them)."""

def parse_channel(bytes: bytes) -> object:
    """A channel description as a dict, or None if the bytes are not one."""

class ByteView:
    """
    Bytes held by the native core (a registered pool allocation), exported through the buffer protocol: numpy.frombuffer views them.
    """

    @property
    def nbytes(self) -> int: ...

def store_fenced(buffer: object, index: int, value: int) -> None:
    """
    Store `value` in the 8-byte word `index` of `buffer`, after every store and load before this call and before every one after it.
    """

def load_fenced(buffer: object, index: int) -> int:
    """
    The 8-byte word `index` of `buffer`, loaded after every load and store before this call and before every one after it.
    """

class RecvHandle:
    """A recv in flight."""

    def give_up(self, code: int, message: str) -> None:
        """
        Stop waiting: the recv's caller gets (code, message); a tensor that arrives anyway is kept for the next recv of its key and step.
        """

    def cancel(self) -> None:
        """
        give_up(CANCELLED, "the recv was cancelled"): its caller cancelled it (a tensor parked, or parked yet, goes to the next recv of its key and step).
        """

    def wait(self, seconds: float) -> int:
        """
        Wait up to `seconds` for the answer and settle the recv's future in this thread: 0 not yet, 1 settled here, 2 settled by the settler thread or another waiter (wait on the future), 3 parked here (settle_parked()).
        """

    def settle_parked(self, call: object, settle: object) -> bool:
        """
        If the answer is parked here, settle(call, code, message, dtype, shape, is_dead, payload, arrived) with it in this thread (arrived: when it came, as time.monotonic()); whether it was. Interrupted, the settler thread settles it.
        """

    def eager(self, call: object, settle: object) -> None:
        """
        From now on the settler thread settles the recv's future as its answer comes, settle(call, code, message, dtype, shape, is_dead, payload) (at once if it is parked here already).
        """

class RecvGroup:
    """A wait for the answers of many recvs at once, the GIL released once."""

    def __init__(self, handles: Sequence[RecvHandle]) -> None:
        """
        Wait for the recvs of `handles` (each in at most one group at a time: a recv another group waits for counts as come at once).
        """

    def wait(self, count: int, seconds: float) -> list[int]:
        """
        Wait up to `seconds` until `count` recvs' answers came since the last call; the indices of those that came (or must be looked at).
        """

    def close(self) -> None:
        """Stop waiting for the recvs."""

class Rendezvous:
    """The grpc+verbs protocol of one task: channels, tensors, recvs."""

    def __init__(self, task: int, task_names: Sequence[str], config: dict, listen_host: str, read_mode: bool, validate: bool, slots: int, pool_block: int, pool_limit: int, recover: bool = False, hold_seconds: float = 300.0) -> None: ...

    def channel(self, peer: int, incarnation: int, offered: bytes) -> bytes:
        """
        This side's channel to `peer` (created or replaced as needed), described.
        """

    def connect(self, peer: int, incarnation: int, remote: bytes) -> None:
        """Connect this side's channel to the peer's description."""

    def fail_channel(self, peer: int, code: int, message: str, transient: bool = False, incarnation: int | None = None) -> None:
        """
        The peer is gone: fail the channel and everything on it. `transient`: the channel broke under the transport instead (its recvs wait for it to be set up again, and next_lost() names the peer). `incarnation`: only a channel to that incarnation of the peer.
        """

    def next_lost(self, timeout: float) -> int | None:
        """
        The next peer whose channel broke under the transport and should be set up again (waits up to `timeout` s, the GIL released; < 0: for ever); None on timeout or once stopped.
        """

    def end_lost(self) -> None:
        """
        next_lost() returns None from now on (its follower ends before the interpreter finalizes).
        """

    def watch(self, step: int, name: str) -> None:
        """
        Note each recv of `name` at `step` that waits for a send of this task, now or later, for next_unmatched(), until unwatch().
        """

    def unwatch(self, step: int, name: str) -> None:
        """Stop noting the recvs of `name` at `step`."""

    def next_unmatched(self, timeout: float) -> tuple[int, int, int, str] | None:
        """
        (step, src, dst, name) of the next recv of a watched name that waits (up to `timeout` s, the GIL released; < 0: for ever); None on timeout or once stopped.
        """

    def end_unmatched(self) -> None:
        """next_unmatched() returns None from now on."""

    def ready(self, peer: int) -> bool:
        """Whether the channel to `peer` is connected and working."""

    def send(self, step: int, dst: int, name: str, dtype: int, shape: Sequence[int], is_dead: bool, data: object, ticket: SendTicket | None = None) -> None:
        """
        Offer a tensor: `data` exports its bytes (buffer protocol); `ticket` (a SendTicket) is told when the receiver has it.
        """

    def send_many(self, steps: Sequence[int], dsts: Sequence[int], names: Sequence[str], dtypes: Sequence[int], shapes: Sequence[Sequence[int]], deads: Sequence[bool], datas: list, tickets: Sequence[SendTicket]) -> tuple[int, int, str]:
        """
        Offer many tensors in order, the GIL released once, each as `send` would: (-1, 0, '') once all are, else (index, code, message) of the first refused, the later ones not offered.
        """

    def broadcast(self, step: int, dsts: Sequence[int], name: str, dtype: int, shape: Sequence[int], is_dead: bool, data: object, tickets: Sequence[SendTicket]) -> list[tuple[int, str]]:
        """
        Offer one tensor to each of `dsts` (a SendTicket each in `tickets`), its bytes registered once for all: (code, message) of each send, in order.
        """

    def recv_many(self, steps: Sequence[int], srcs: Sequence[int], names: Sequence[str], timeout: float, hand: object | None) -> list:
        """
        Receive many tensors (blocking, the GIL released once): each entry's (code, message, dtype, shape, is_dead, payload), in entry order, also put in `hand.held` (unless None) as (core, steps, srcs, names, answers) before they are returned, so that a signal's handler that runs as the call returns (Ctrl-C during it) finds them there (tensorverbs.in_hand). Interrupted, every entry is given up and each tensor that came is kept for the next recv of it.
        """

    def recv_blocks(self, step: int, src: int, name: str, dtype: int, shape: Sequence[int], nbytes: int, buffer: object, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], timeout: float) -> list:
        """
        Receive blocks '<name>/<i>' (each of dtype, shape, nbytes bytes) into row rows[i] of `buffer` (blocking, the GIL released once; interrupted, each tensor that came is kept for the next recv of it): the entries that failed, as (index, code, message, theirs), theirs (dtype, shape, is_dead) of a tensor that does not fit its row (kept for the next recv of it), else None.
        """

    def send_blocks(self, step: int, dst: int, name: str, dtype: int, shape: Sequence[int], nbytes: int, buffer: object, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], ticket: SendTicket) -> tuple[int, int, str]:
        """
        Offer row rows[i] of `buffer` as tensor '<name>/<i>' (dtype, shape, nbytes bytes), the rows registered once for all, each carrying `ticket` (opened for len(rows) parts): (-1, 0, '') once all are, else (index, code, message) of the first refused (the later ones not offered, the ticket failed).
        """

    def recv(self, step: int, src: int, name: str, timeout: float, destination: object | None, hand: object | None) -> tuple:
        """
        Receive (blocking, the GIL released): (code, message, dtype, shape, is_dead, payload), also put in `hand.held` (unless None) as (core, step, src, name, answer) before it is returned, as recv_many does. A tensor from a peer that fits `destination`, (dtype, shape, writable buffer), lands in it where it can (payload then views it).
        """

    def recv_async(self, step: int, src: int, name: str, timeout: float, future: object, parked: object | None = None, call: object | None = None, settle: object | None = None, destination: object | None = None) -> RecvHandle:
        """
        Start a recv of `future` (a RecvFuture, told its RecvHandle by future.settled_by(handle, parked) before this returns: the handle is given up if that raises). settle(call, code, message, dtype, shape, is_dead, payload) is called with its answer (returning False if the recv was cancelled or the tensor is refused: it goes to the next recv); call.done() tells whether the recv's future is settled. Without call and settle the answer is parked in the handle until the future settles itself with it (`parked`: how). `destination` as for recv. The handle.
        """

    def give_back(self, step: int, src: int, name: str, dtype: int, shape: Sequence[int], is_dead: bool, payload: object) -> None:
        """
        Hand a received tensor its caller refused to the next recv of its key and step.
        """

    def abort_step(self, step: int, code: int, message: str) -> None: ...

    def cleanup_step(self, step: int) -> None: ...

    def allocate(self, nbytes: int) -> ByteView:
        """Registered memory, as a ByteView."""

    def stats(self) -> dict: ...

    def pending(self) -> tuple[int, int]: ...

    def table_steps(self) -> int: ...

    @property
    def provider(self) -> str: ...

    @property
    def device(self) -> str: ...

    def stop(self) -> None: ...

class SendCompletion:
    """The outcome of one send, once settled."""

    def wait(self, timeout: float) -> bool:
        """Wait until settled (timeout < 0: none); False if the timeout passed."""

    def outcome(self) -> tuple[int, str] | None:
        """(code, message) once settled (code 0: delivered), else None."""

    @property
    def what(self) -> str: ...

class SendTicket:
    """
    What a send's value carries: settles its completion, as dropped when it is freed unsettled.
    """

    def deliver(self) -> None:
        """The receiver has the tensor."""

    def fail(self, code: int, message: str) -> None:
        """The send failed: '<what>: <message>'."""

    @property
    def completion(self) -> SendCompletion: ...

class SendLedger:
    """The completions of one task's sends not settled yet."""

    def __init__(self) -> None: ...

    def open(self, what: str, parts: int = 1) -> SendTicket:
        """
        A ticket for a new send described by `what`, of `parts` values (delivered once each of them is).
        """

    def wait_all(self, timeout: float) -> bool:
        """
        Wait until every send is settled (timeout < 0: none); False if it passed.
        """

    def open_count(self) -> int: ...

    def describe_open(self, limit: int) -> list[str]:
        """What the oldest `limit` open sends are."""

    def fail_all(self, code: int, message: str) -> None:
        """Settle every open send with (code, '<what>: <message>')."""

def providers() -> list:
    """Every verbs provider: (name, available, reason, devices)."""

def select(provider: str, device: str = '', port: int = 0, gid_index: int = -1, mtu: int = 0) -> dict:
    """
    What a context opened with these settings would use: the provider, and for ibverbs the device, port, GID and MTU (an error says why none).
    """

class SendWR:
    """A send work request (ibv_send_wr, one SGE)."""

    def __init__(self) -> None: ...

    @property
    def wr_id(self) -> int: ...

    @wr_id.setter
    def wr_id(self, arg: int, /) -> None: ...

    @property
    def opcode(self) -> int: ...

    @opcode.setter
    def opcode(self, arg: int, /) -> None: ...

    @property
    def addr(self) -> int: ...

    @addr.setter
    def addr(self, arg: int, /) -> None: ...

    @property
    def length(self) -> int: ...

    @length.setter
    def length(self, arg: int, /) -> None: ...

    @property
    def lkey(self) -> int: ...

    @lkey.setter
    def lkey(self, arg: int, /) -> None: ...

    @property
    def remote_addr(self) -> int: ...

    @remote_addr.setter
    def remote_addr(self, arg: int, /) -> None: ...

    @property
    def rkey(self) -> int: ...

    @rkey.setter
    def rkey(self, arg: int, /) -> None: ...

    @property
    def imm(self) -> int: ...

    @imm.setter
    def imm(self, arg: int, /) -> None: ...

    @property
    def signaled(self) -> bool: ...

    @signaled.setter
    def signaled(self, arg: bool, /) -> None: ...

class WorkCompletion:
    """A work completion (ibv_wc)."""

    @property
    def wr_id(self) -> int: ...

    @property
    def qp_num(self) -> int: ...

    @property
    def byte_len(self) -> int: ...

    @property
    def imm(self) -> int: ...

    @property
    def has_imm(self) -> bool: ...

    @property
    def status(self) -> int: ...

    @property
    def status_name(self) -> str: ...

    @property
    def opcode(self) -> int: ...

    @property
    def ok(self) -> bool: ...

class MemoryRegion:
    """A registered region (ibv_mr)."""

    @property
    def addr(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def lkey(self) -> int: ...

    @property
    def rkey(self) -> int: ...

    @property
    def buffer(self) -> ByteView:
        """The region's bytes (buffer protocol)."""

class MemoryWindow:
    """Remote access to a range, until revoked."""

    @property
    def addr(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def rkey(self) -> int: ...

    def revoke(self) -> bool: ...

    def quiesced(self) -> bool: ...

class ProtectionDomain:
    """A protection domain (ibv_pd)."""

    def allocate_memory(self, length: int, access: int) -> MemoryRegion: ...

    def register_memory(self, buffer: object, access: int) -> MemoryRegion: ...

    def bind_window(self, region: MemoryRegion, addr: int, length: int, access: int) -> MemoryWindow: ...

class CompletionQueue:
    """A completion queue (ibv_cq)."""

    def poll(self, max: int = 64) -> list[WorkCompletion]: ...

    def wait(self, max: int = 64, timeout_ms: int = -1) -> list[WorkCompletion]:
        """Up to `max` completions, waiting (GIL released)."""

    def wake(self) -> None: ...

class QueuePair:
    """A reliable-connected queue pair (ibv_qp)."""

    @property
    def qp_num(self) -> int: ...

    @property
    def state(self) -> int: ...

    @property
    def endpoint(self) -> bytes: ...

    @property
    def mtu(self) -> int: ...

    def connect(self, remote: bytes) -> None: ...

    def post_send(self, wrs: Sequence[SendWR]) -> None: ...

    def post_rows(self, opcode: int, local_base: int, lkey: int, local_rows: int, remote_base: int, rkey: int, remote_rows: int, row_bytes: int, src: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], dst: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], first: int, max_requests: int) -> int:
        """
        Posts entries from `first` of a row access (row src[i] of the remote rows to or from row dst[i] of the local ones), runs of rows as one request, at most `max_requests`, the last signaled; the entry after the last posted.
        """

    def post_recv(self, wr_ids: Sequence[int]) -> None: ...

    def to_error(self, why: str) -> None: ...

    @property
    def error_detail(self) -> str: ...

class Context:
    """An open device (ibv_context)."""

    @property
    def device(self) -> dict: ...

    def alloc_pd(self) -> ProtectionDomain: ...

    def create_cq(self, depth: int) -> CompletionQueue: ...

    def create_qp(self, pd: ProtectionDomain, send_cq: CompletionQueue, recv_cq: CompletionQueue, max_send_wr: int = 1024, max_recv_wr: int = 1024) -> QueuePair: ...

def open_context(provider: str = 'auto', listen_host: str = '127.0.0.1', same_host: str = 'auto', config: dict | None = None) -> Context:
    """
    Open a device of `provider` (auto, soft, ibverbs); with `config` (RdmaConfig.to_core()), of the provider and device it selects, `provider` and `same_host` being ignored.
    """

def shutdown() -> None:
    """End the core's Python threads (at interpreter exit)."""

def set_variant_settle(settle: object) -> None:
    """
    How a parked recv's answer of DataType DT_VARIANT (a descriptor to act on at once, such as a relay's) settles its future as it comes, in the settler thread: settle(weakref to the future, code, message, dtype, shape, is_dead, payload); any other answer stays parked. Set once.
    """

def decode_message(data: bytes) -> dict:
    """
    One control message as a dict; on a malformed message, error is its reason and request_index/type are set when attributable. For tests.
    """
