"""tensorverbs: move tensors between the tasks of a distributed job over gRPC or RDMA verbs."""
from .errors import (
    AbortedError, CancelledError, Code, DataLossError, DeadlineExceededError,
    FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
    ResourceExhaustedError, TensorverbsError, UnavailableError, UnimplementedError, UnknownError,
)

__version__ = "0.1.0"

__all__ = [
    "AbortedError", "CancelledError", "Code", "DataLossError", "DeadlineExceededError",
    "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError",
    "ResourceExhaustedError", "TensorverbsError", "UnavailableError", "UnimplementedError",
    "UnknownError", "__version__",
]
