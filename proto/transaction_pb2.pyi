from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    TRANSACTION_COMMIT: _ClassVar[TransactionResolution]
    TRANSACTION_ROLLBACK: _ClassVar[TransactionResolution]
    TRANSACTION_UNKNOWN: _ClassVar[TransactionResolution]
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
TRANSACTION_COMMIT: TransactionResolution
TRANSACTION_ROLLBACK: TransactionResolution
TRANSACTION_UNKNOWN: TransactionResolution

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "transaction_id", "commit_log_offset", "msg_id", "resolution", "from_check", "client_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECK_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transaction_id: str
    commit_log_offset: int
    msg_id: str
    resolution: TransactionResolution
    from_check: bool
    client_id: str
    def __init__(self, producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., from_check: _Optional[bool] = ..., client_id: _Optional[str] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class ProducerHeartbeat(_message.Message):
    __slots__ = ("client_id", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., producer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class TransactionCheckRequest(_message.Message):
    __slots__ = ("producer_group", "transaction_id", "commit_log_offset", "queue_offset", "msg_id", "record", "check_times", "broker_name")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transaction_id: str
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    record: bytes
    check_times: int
    broker_name: str
    def __init__(self, producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., queue_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., record: _Optional[bytes] = ..., check_times: _Optional[int] = ..., broker_name: _Optional[str] = ...) -> None: ...
