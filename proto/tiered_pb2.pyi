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

class TieredSegment(_message.Message):
    __slots__ = ("path", "type", "topic", "queue_id", "base_offset", "size", "status", "create_ms", "begin_ms", "end_ms", "seal_ms")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_MS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    SEAL_MS_FIELD_NUMBER: _ClassVar[int]
    path: str
    type: int
    topic: str
    queue_id: int
    base_offset: int
    size: int
    status: int
    create_ms: int
    begin_ms: int
    end_ms: int
    seal_ms: int
    def __init__(self, path: _Optional[str] = ..., type: _Optional[int] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., base_offset: _Optional[int] = ..., size: _Optional[int] = ..., status: _Optional[int] = ..., create_ms: _Optional[int] = ..., begin_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., seal_ms: _Optional[int] = ...) -> None: ...

class TieredMetadataRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TieredMetadataResponse(_message.Message):
    __slots__ = ("code", "remark", "broker_name", "backend_provider", "backend_root", "segments", "snapshot_ms", "s3_endpoint", "s3_bucket", "s3_region")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BACKEND_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ROOT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_MS_FIELD_NUMBER: _ClassVar[int]
    S3_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    S3_BUCKET_FIELD_NUMBER: _ClassVar[int]
    S3_REGION_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    broker_name: str
    backend_provider: str
    backend_root: str
    segments: _containers.RepeatedCompositeFieldContainer[TieredSegment]
    snapshot_ms: int
    s3_endpoint: str
    s3_bucket: str
    s3_region: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., broker_name: _Optional[str] = ..., backend_provider: _Optional[str] = ..., backend_root: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[TieredSegment, _Mapping]]] = ..., snapshot_ms: _Optional[int] = ..., s3_endpoint: _Optional[str] = ..., s3_bucket: _Optional[str] = ..., s3_region: _Optional[str] = ...) -> None: ...

class ReplaceSegmentsRequest(_message.Message):
    __slots__ = ("old", "merged")
    OLD_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    old: _containers.RepeatedCompositeFieldContainer[TieredSegment]
    merged: TieredSegment
    def __init__(self, old: _Optional[_Iterable[_Union[TieredSegment, _Mapping]]] = ..., merged: _Optional[_Union[TieredSegment, _Mapping]] = ...) -> None: ...

class ReplaceSegmentsResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class MarkExpiredRequest(_message.Message):
    __slots__ = ("now_ms",)
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    def __init__(self, now_ms: _Optional[int] = ...) -> None: ...

class SegmentsResponse(_message.Message):
    __slots__ = ("code", "remark", "segments")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    segments: _containers.RepeatedCompositeFieldContainer[TieredSegment]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[TieredSegment, _Mapping]]] = ...) -> None: ...

class DropSegmentsRequest(_message.Message):
    __slots__ = ("segments",)
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[TieredSegment]
    def __init__(self, segments: _Optional[_Iterable[_Union[TieredSegment, _Mapping]]] = ...) -> None: ...

class DropSegmentsResponse(_message.Message):
    __slots__ = ("code", "remark", "dropped")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    dropped: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., dropped: _Optional[int] = ...) -> None: ...

class TierCopyRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: str
    def __init__(self, known_version: _Optional[str] = ...) -> None: ...

class TierCopyResponse(_message.Message):
    __slots__ = ("code", "remark", "tier_id", "checkpoint", "uploaded_end", "records", "version", "whole")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TIER_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_END_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    tier_id: str
    checkpoint: int
    uploaded_end: int
    records: bytes
    version: str
    whole: bool
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., tier_id: _Optional[str] = ..., checkpoint: _Optional[int] = ..., uploaded_end: _Optional[int] = ..., records: _Optional[bytes] = ..., version: _Optional[str] = ..., whole: _Optional[bool] = ...) -> None: ...
