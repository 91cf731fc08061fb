from proto import broker_pb2 as _broker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KvOpType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_OP_UNSPECIFIED: _ClassVar[KvOpType]
    KV_PUT: _ClassVar[KvOpType]
    KV_DELETE: _ClassVar[KvOpType]
    KV_CAS: _ClassVar[KvOpType]

class KvEntryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_ABSENT: _ClassVar[KvEntryState]
    KV_PRESENT: _ClassVar[KvEntryState]
    KV_DELETED: _ClassVar[KvEntryState]
KV_OP_UNSPECIFIED: KvOpType
KV_PUT: KvOpType
KV_DELETE: KvOpType
KV_CAS: KvOpType
KV_ABSENT: KvEntryState
KV_PRESENT: KvEntryState
KV_DELETED: KvEntryState

class KvWriteRequest(_message.Message):
    __slots__ = ("op", "key", "value", "expected", "expect_absent", "request_id")
    OP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    EXPECT_ABSENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    op: KvOpType
    key: bytes
    value: bytes
    expected: bytes
    expect_absent: bool
    request_id: int
    def __init__(self, op: _Optional[_Union[KvOpType, str]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., expected: _Optional[bytes] = ..., expect_absent: _Optional[bool] = ..., request_id: _Optional[int] = ...) -> None: ...

class KvWriteResponse(_message.Message):
    __slots__ = ("code", "remark", "applied", "exists", "current", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    applied: bool
    exists: bool
    current: bytes
    request_id: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., applied: _Optional[bool] = ..., exists: _Optional[bool] = ..., current: _Optional[bytes] = ..., request_id: _Optional[int] = ...) -> None: ...

class KvWriteFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[KvWriteRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[KvWriteRequest, _Mapping]]] = ...) -> None: ...

class KvWriteAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[KvWriteResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[KvWriteResponse, _Mapping]]] = ...) -> None: ...

class KvEntry(_message.Message):
    __slots__ = ("key", "state", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    state: KvEntryState
    value: bytes
    def __init__(self, key: _Optional[bytes] = ..., state: _Optional[_Union[KvEntryState, str]] = ..., value: _Optional[bytes] = ...) -> None: ...

class KvGetRequest(_message.Message):
    __slots__ = ("keys", "addressing", "queue_id", "pack_states", "request_id")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    PACK_STATES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    addressing: _broker_pb2.QueueAddressing
    queue_id: int
    pack_states: bool
    request_id: int
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ..., addressing: _Optional[_Union[_broker_pb2.QueueAddressing, str]] = ..., queue_id: _Optional[int] = ..., pack_states: _Optional[bool] = ..., request_id: _Optional[int] = ...) -> None: ...

class KvGetResponse(_message.Message):
    __slots__ = ("code", "remark", "states", "packed_states", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PACKED_STATES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    states: _containers.RepeatedScalarFieldContainer[bytes]
    packed_states: bytes
    request_id: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., states: _Optional[_Iterable[bytes]] = ..., packed_states: _Optional[bytes] = ..., request_id: _Optional[int] = ...) -> None: ...

class KvGetFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[KvGetRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[KvGetRequest, _Mapping]]] = ...) -> None: ...

class KvGetAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[KvGetResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[KvGetResponse, _Mapping]]] = ...) -> None: ...

class KvScanRequest(_message.Message):
    __slots__ = ("shard", "prefix", "start_after", "limit", "addressing", "queue_id")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    shard: int
    prefix: bytes
    start_after: bytes
    limit: int
    addressing: _broker_pb2.QueueAddressing
    queue_id: int
    def __init__(self, shard: _Optional[int] = ..., prefix: _Optional[bytes] = ..., start_after: _Optional[bytes] = ..., limit: _Optional[int] = ..., addressing: _Optional[_Union[_broker_pb2.QueueAddressing, str]] = ..., queue_id: _Optional[int] = ...) -> None: ...

class KvScanResponse(_message.Message):
    __slots__ = ("code", "remark", "entries", "exhausted")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    entries: _containers.RepeatedCompositeFieldContainer[KvEntry]
    exhausted: bool
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[KvEntry, _Mapping]]] = ..., exhausted: _Optional[bool] = ...) -> None: ...

class KvSnapshotRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...

class KvSnapshotHeader(_message.Message):
    __slots__ = ("shard", "total_shards", "broker_name", "commit_log_offset", "created_ms")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SHARDS_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    total_shards: int
    broker_name: str
    commit_log_offset: int
    created_ms: int
    def __init__(self, shard: _Optional[int] = ..., total_shards: _Optional[int] = ..., broker_name: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class KvSnapshotChunk(_message.Message):
    __slots__ = ("header", "entries")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    header: KvSnapshotHeader
    entries: _containers.RepeatedCompositeFieldContainer[KvEntry]
    def __init__(self, header: _Optional[_Union[KvSnapshotHeader, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[KvEntry, _Mapping]]] = ...) -> None: ...

class KvImportResponse(_message.Message):
    __slots__ = ("code", "remark", "imported")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    imported: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., imported: _Optional[int] = ...) -> None: ...

class KvProvisionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvProvisionResponse(_message.Message):
    __slots__ = ("code", "remark", "total_shards")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SHARDS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    total_shards: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., total_shards: _Optional[int] = ...) -> None: ...
