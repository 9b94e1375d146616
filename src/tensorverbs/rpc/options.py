"""gRPC channel and server options shared by every task.

Messages received are bounded (tensors are streamed in chunks of 1 MiB, and nothing else
is large), so a peer cannot make gRPC buffer a message of any size; HTTP/2 keepalive, and
a ping timeout as short, so a connection whose other end vanished without closing it is
noticed within seconds (without the ping timeout, a connection whose peer had closed it
during an outage could wait a minute for a ping's answer, its calls with it); fast
reconnect backoff for peers that start late or come back, but a connection attempt given
the time a busy peer needs to answer (CONNECT_TIMEOUT_MS), no proxy, and no SO_REUSEPORT (two servers must not
silently share a port). A RecvTensor call waits at the sender until its tensor is sent,
so a receiver may have thousands open: gRPC core's limits on calls waiting for the
server to take them (1,000, then 3,000, beyond which it cancels or refuses them) are
raised to what a receiver may have waiting (the service bounds each receiver's).
"""
from __future__ import annotations

KEEPALIVE_MS = 2000
#: the most exports one ReleaseSharedTensor may release (a task refuses a call of more)
RELEASE_BATCH = 4096
#: how long one connection attempt may take to get the peer's first HTTP/2 frame (gRPC
#: sets it with "grpc.min_reconnect_backoff_ms"): a peer busy in a set-up storm may answer
#: late, and an attempt given up before its answer is retried only to be given up again
CONNECT_TIMEOUT_MS = 5000
KEEPALIVE_TIMEOUT_MS = 3000
#: how long a peer whose connection broke may take to answer again (as the same
#: incarnation) before it is declared gone: a short outage is ridden out
RECONNECT_SECONDS = 5.0
#: the liveness timeout: how long a peer may be unreachable before the calls waiting on it
#: fail (a keepalive ping after KEEPALIVE_MS without traffic, unanswered for
#: KEEPALIVE_TIMEOUT_MS, then RECONNECT_SECONDS of trying to reach it again)
LIVENESS_SECONDS = (KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS) / 1000 + RECONNECT_SECONDS
#: trailing metadata that marks a call ended by the service itself (a TensorverbsError of
#: the handler), not by its connection
SERVICE_ERROR = ("tensorverbs-error", "1")
#: the largest message a task receives
MAX_MESSAGE_BYTES = 4 << 20

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_http_proxy", 0),
    ("grpc.enable_retries", 0),
]

SERVER_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),
    ("grpc.server.max_pending_requests", 1 << 16),
    ("grpc.server.max_pending_requests_hard_limit", 1 << 17),
]

SERVICE = "tensorverbs.TensorverbsService"


def method(name: str) -> str:
    """The full path of a method of the tensorverbs service."""
    return f"/{SERVICE}/{name}"
