from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StateChunk(_message.Message):
    __slots__ = ("store", "applied_offset", "records", "last")
    STORE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    store: str
    applied_offset: int
    records: bytes
    last: bool
    def __init__(self, store: _Optional[str] = ..., applied_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class ReplicaHandshake(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "commit_log_end", "mapped_file_size", "last_epoch", "master_epoch", "epochs", "starts_anywhere", "reports_metadata_copy")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_END_FIELD_NUMBER: _ClassVar[int]
    MAPPED_FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    STARTS_ANYWHERE_FIELD_NUMBER: _ClassVar[int]
    REPORTS_METADATA_COPY_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    commit_log_end: int
    mapped_file_size: int
    last_epoch: int
    master_epoch: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    starts_anywhere: bool
    reports_metadata_copy: bool
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., commit_log_end: _Optional[int] = ..., mapped_file_size: _Optional[int] = ..., last_epoch: _Optional[int] = ..., master_epoch: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., starts_anywhere: _Optional[bool] = ..., reports_metadata_copy: _Optional[bool] = ...) -> None: ...

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class ReplicaFrame(_message.Message):
    __slots__ = ("handshake", "ack_offset", "metadata_copied")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_COPIED_FIELD_NUMBER: _ClassVar[int]
    handshake: ReplicaHandshake
    ack_offset: int
    metadata_copied: bool
    def __init__(self, handshake: _Optional[_Union[ReplicaHandshake, _Mapping]] = ..., ack_offset: _Optional[int] = ..., metadata_copied: _Optional[bool] = ...) -> None: ...

class ReplicationFrame(_message.Message):
    __slots__ = ("offset", "data", "confirm_offset", "master_addr", "epoch", "epoch_start_offset", "truncate_to", "epochs", "copy_state", "segment_size")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    COPY_STATE_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    confirm_offset: int
    master_addr: str
    epoch: int
    epoch_start_offset: int
    truncate_to: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    copy_state: bool
    segment_size: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., confirm_offset: _Optional[int] = ..., master_addr: _Optional[str] = ..., epoch: _Optional[int] = ..., epoch_start_offset: _Optional[int] = ..., truncate_to: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., copy_state: _Optional[bool] = ..., segment_size: _Optional[int] = ...) -> None: ...
