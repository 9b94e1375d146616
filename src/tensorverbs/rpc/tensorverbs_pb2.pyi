from tensorverbs.rpc import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("task", "incarnation", "protocol")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    task: str
    incarnation: int
    protocol: str
    def __init__(self, task: _Optional[str] = ..., incarnation: _Optional[int] = ..., protocol: _Optional[str] = ...) -> None: ...

class Channel(_message.Message):
    __slots__ = ("provider", "lid", "qpn", "psn", "snp", "iid", "mtu", "provider_info", "max_message_bytes")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    LID_FIELD_NUMBER: _ClassVar[int]
    QPN_FIELD_NUMBER: _ClassVar[int]
    PSN_FIELD_NUMBER: _ClassVar[int]
    SNP_FIELD_NUMBER: _ClassVar[int]
    IID_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_INFO_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    provider: str
    lid: int
    qpn: int
    psn: int
    snp: int
    iid: int
    mtu: int
    provider_info: bytes
    max_message_bytes: int
    def __init__(self, provider: _Optional[str] = ..., lid: _Optional[int] = ..., qpn: _Optional[int] = ..., psn: _Optional[int] = ..., snp: _Optional[int] = ..., iid: _Optional[int] = ..., mtu: _Optional[int] = ..., provider_info: _Optional[bytes] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class MemoryRegion(_message.Message):
    __slots__ = ("remote_addr", "rkey", "length")
    REMOTE_ADDR_FIELD_NUMBER: _ClassVar[int]
    RKEY_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    remote_addr: int
    rkey: int
    length: int
    def __init__(self, remote_addr: _Optional[int] = ..., rkey: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class GetRemoteAddressRequest(_message.Message):
    __slots__ = ("host_name", "channel", "mr", "incarnation", "address")
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    MR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    host_name: str
    channel: Channel
    mr: _containers.RepeatedCompositeFieldContainer[MemoryRegion]
    incarnation: int
    address: str
    def __init__(self, host_name: _Optional[str] = ..., channel: _Optional[_Union[Channel, _Mapping]] = ..., mr: _Optional[_Iterable[_Union[MemoryRegion, _Mapping]]] = ..., incarnation: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class GetRemoteAddressResponse(_message.Message):
    __slots__ = ("host_name", "channel", "mr", "incarnation")
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    MR_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    host_name: str
    channel: Channel
    mr: _containers.RepeatedCompositeFieldContainer[MemoryRegion]
    incarnation: int
    def __init__(self, host_name: _Optional[str] = ..., channel: _Optional[_Union[Channel, _Mapping]] = ..., mr: _Optional[_Iterable[_Union[MemoryRegion, _Mapping]]] = ..., incarnation: _Optional[int] = ...) -> None: ...

class GetRemoteAccessRequest(_message.Message):
    __slots__ = ("host_name", "incarnation", "provider", "endpoint")
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    host_name: str
    incarnation: int
    provider: str
    endpoint: bytes
    def __init__(self, host_name: _Optional[str] = ..., incarnation: _Optional[int] = ..., provider: _Optional[str] = ..., endpoint: _Optional[bytes] = ...) -> None: ...

class GetRemoteAccessResponse(_message.Message):
    __slots__ = ("incarnation", "provider", "endpoint")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    provider: str
    endpoint: bytes
    def __init__(self, incarnation: _Optional[int] = ..., provider: _Optional[str] = ..., endpoint: _Optional[bytes] = ...) -> None: ...

class HoldPublicationRequest(_message.Message):
    __slots__ = ("host_name", "incarnation", "header_addr", "header_rkey", "seconds")
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HEADER_RKEY_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    host_name: str
    incarnation: int
    header_addr: int
    header_rkey: int
    seconds: float
    def __init__(self, host_name: _Optional[str] = ..., incarnation: _Optional[int] = ..., header_addr: _Optional[int] = ..., header_rkey: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class HoldPublicationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServeRelayedRequest(_message.Message):
    __slots__ = ("host_name", "tag", "receiver")
    HOST_NAME_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    host_name: str
    tag: str
    receiver: str
    def __init__(self, host_name: _Optional[str] = ..., tag: _Optional[str] = ..., receiver: _Optional[str] = ...) -> None: ...

class ServeRelayedResponse(_message.Message):
    __slots__ = ("served",)
    SERVED_FIELD_NUMBER: _ClassVar[int]
    served: bool
    def __init__(self, served: _Optional[bool] = ...) -> None: ...

class RecvTensorRequest(_message.Message):
    __slots__ = ("step_id", "rendezvous_key", "request_id", "received", "retry_of", "receiver_incarnation")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    RETRY_OF_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    step_id: int
    rendezvous_key: str
    request_id: int
    received: bool
    retry_of: _containers.RepeatedScalarFieldContainer[int]
    receiver_incarnation: int
    def __init__(self, step_id: _Optional[int] = ..., rendezvous_key: _Optional[str] = ..., request_id: _Optional[int] = ..., received: _Optional[bool] = ..., retry_of: _Optional[_Iterable[int]] = ..., receiver_incarnation: _Optional[int] = ...) -> None: ...

class SettleRecvTensorsRequest(_message.Message):
    __slots__ = ("taken", "dropped")
    TAKEN_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    taken: _containers.RepeatedScalarFieldContainer[int]
    dropped: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, taken: _Optional[_Iterable[int]] = ..., dropped: _Optional[_Iterable[int]] = ...) -> None: ...

class SettleRecvTensorsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelRecvTensorRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class CancelRecvTensorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseSharedTensorRequest(_message.Message):
    __slots__ = ("incarnation", "export_ids")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    EXPORT_IDS_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    export_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, incarnation: _Optional[int] = ..., export_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ReleaseSharedTensorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ErrorStatus(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class TensorMeta(_message.Message):
    __slots__ = ("dtype", "shape", "is_dead", "tensor_bytes", "is_proto")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    IS_DEAD_FIELD_NUMBER: _ClassVar[int]
    TENSOR_BYTES_FIELD_NUMBER: _ClassVar[int]
    IS_PROTO_FIELD_NUMBER: _ClassVar[int]
    dtype: _tensor_pb2.DataType
    shape: _tensor_pb2.TensorShapeProto
    is_dead: bool
    tensor_bytes: int
    is_proto: bool
    def __init__(self, dtype: _Optional[_Union[_tensor_pb2.DataType, str]] = ..., shape: _Optional[_Union[_tensor_pb2.TensorShapeProto, _Mapping]] = ..., is_dead: _Optional[bool] = ..., tensor_bytes: _Optional[int] = ..., is_proto: _Optional[bool] = ...) -> None: ...

class RecvTensorResponse(_message.Message):
    __slots__ = ("meta", "chunk")
    META_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    meta: TensorMeta
    chunk: bytes
    def __init__(self, meta: _Optional[_Union[TensorMeta, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class GetHeldTensorsRequest(_message.Message):
    __slots__ = ("receiver", "name", "step_id")
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    receiver: str
    name: str
    step_id: int
    def __init__(self, receiver: _Optional[str] = ..., name: _Optional[str] = ..., step_id: _Optional[int] = ...) -> None: ...

class GetHeldTensorsResponse(_message.Message):
    __slots__ = ("steps", "names")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedScalarFieldContainer[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, steps: _Optional[_Iterable[int]] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...
