from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaHandshake(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "commit_log_end", "mapped_file_size")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_END_FIELD_NUMBER: _ClassVar[int]
    MAPPED_FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    commit_log_end: int
    mapped_file_size: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., commit_log_end: _Optional[int] = ..., mapped_file_size: _Optional[int] = ...) -> None: ...

class ReplicaFrame(_message.Message):
    __slots__ = ("handshake", "ack_offset")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    handshake: ReplicaHandshake
    ack_offset: int
    def __init__(self, handshake: _Optional[_Union[ReplicaHandshake, _Mapping]] = ..., ack_offset: _Optional[int] = ...) -> None: ...

class ReplicationFrame(_message.Message):
    __slots__ = ("offset", "data", "confirm_offset", "master_addr")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    confirm_offset: int
    master_addr: str
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., confirm_offset: _Optional[int] = ..., master_addr: _Optional[str] = ...) -> None: ...
