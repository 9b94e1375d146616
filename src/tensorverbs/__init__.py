"""tensorverbs: move tensors between the tasks of a distributed job over gRPC or RDMA verbs."""
from .cluster import ClusterSpec, TaskName, parse_task
from .errors import (
    AbortedError, CancelledError, Code, DataLossError, DeadlineExceededError,
    FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError, PermissionDeniedError,
    ResourceExhaustedError, TensorverbsError, UnauthenticatedError, UnavailableError, UnimplementedError,
    UnknownError,
)
from . import resolvers
from .batches import RecvEntry, SendEntry
from .one_sided import Publication, PublicationRef, Published, RemoteBuffer
from .rendezvous.completion import SendHandle
from .rendezvous.key import RendezvousKey, format_key, parse_key
from .rendezvous.waits import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, as_completed, wait
from .rpc.tls import TlsConfig
from .server import Server
from .tensor import DeadTensor, is_dead
from .tensor_list import TensorList

__version__ = "0.1.0"

__all__ = [
    "ALL_COMPLETED", "FIRST_COMPLETED", "FIRST_EXCEPTION", "ClusterSpec", "DeadTensor", "Publication", "PublicationRef", "Published", "RecvEntry", "RemoteBuffer", "RendezvousKey", "SendEntry", "SendHandle", "Server", "TaskName", "TensorList", "TlsConfig", "format_key",
    "is_dead",
    "as_completed", "parse_key", "parse_task", "resolvers", "wait",
    "AbortedError", "CancelledError", "Code", "DataLossError", "DeadlineExceededError",
    "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError",
    "PermissionDeniedError", "ResourceExhaustedError", "TensorverbsError", "UnauthenticatedError", "UnavailableError",
    "UnimplementedError", "UnknownError", "__version__",
]
