from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TieredStatusRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TieredQueueStatus(_message.Message):
    __slots__ = ("queue_id", "local_min_offset", "local_max_offset", "tiered_min_offset", "tiered_max_offset", "commit_log_segments", "consume_queue_segments", "tiered_bytes", "upload_lag")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIERED_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIERED_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_QUEUE_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    TIERED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_LAG_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    local_min_offset: int
    local_max_offset: int
    tiered_min_offset: int
    tiered_max_offset: int
    commit_log_segments: int
    consume_queue_segments: int
    tiered_bytes: int
    upload_lag: int
    def __init__(self, queue_id: _Optional[int] = ..., local_min_offset: _Optional[int] = ..., local_max_offset: _Optional[int] = ..., tiered_min_offset: _Optional[int] = ..., tiered_max_offset: _Optional[int] = ..., commit_log_segments: _Optional[int] = ..., consume_queue_segments: _Optional[int] = ..., tiered_bytes: _Optional[int] = ..., upload_lag: _Optional[int] = ...) -> None: ...

class TieredStatusResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "storage_level", "queues")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    STORAGE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    broker_name: str
    storage_level: str
    queues: _containers.RepeatedCompositeFieldContainer[TieredQueueStatus]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., storage_level: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[TieredQueueStatus, _Mapping]]] = ...) -> None: ...
