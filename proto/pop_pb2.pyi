from proto import broker_pb2 as _broker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PopStateRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: str
    def __init__(self, known_version: _Optional[str] = ...) -> None: ...

class PopStateSnapshot(_message.Message):
    __slots__ = ("records", "version", "unchanged")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    version: str
    unchanged: bool
    def __init__(self, records: _Optional[bytes] = ..., version: _Optional[str] = ..., unchanged: _Optional[bool] = ...) -> None: ...

class PopStreamFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PopMessageRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PopMessageRequest, _Mapping]]] = ...) -> None: ...

class PopStreamAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PopMessageResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[PopMessageResponse, _Mapping]]] = ...) -> None: ...

class AckStreamFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[AckMessageRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[AckMessageRequest, _Mapping]]] = ...) -> None: ...

class AckStreamAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[AckMessageResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[AckMessageResponse, _Mapping]]] = ...) -> None: ...

class PopMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "expression", "max_msg_nums", "invisible_time_ms", "poll_time_ms", "addressing", "client_id", "request_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    POLL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    expression: str
    max_msg_nums: int
    invisible_time_ms: int
    poll_time_ms: int
    addressing: _broker_pb2.QueueAddressing
    client_id: str
    request_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., expression: _Optional[str] = ..., max_msg_nums: _Optional[int] = ..., invisible_time_ms: _Optional[int] = ..., poll_time_ms: _Optional[int] = ..., addressing: _Optional[_Union[_broker_pb2.QueueAddressing, str]] = ..., client_id: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...

class PoppedMessage(_message.Message):
    __slots__ = ("receipt_handle", "reconsume_times", "invisible_until_ms")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    reconsume_times: int
    invisible_until_ms: int
    def __init__(self, receipt_handle: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class PopMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "records", "popped", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    POPPED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    records: bytes
    popped: _containers.RepeatedCompositeFieldContainer[PoppedMessage]
    request_id: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., records: _Optional[bytes] = ..., popped: _Optional[_Iterable[_Union[PoppedMessage, _Mapping]]] = ..., request_id: _Optional[int] = ...) -> None: ...

class AckMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handles", "request_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    request_id: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ..., request_id: _Optional[int] = ...) -> None: ...

class AckResult(_message.Message):
    __slots__ = ("receipt_handle", "code", "remark")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    code: int
    remark: str
    def __init__(self, receipt_handle: _Optional[str] = ..., code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class AckMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "results", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    request_id: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ..., request_id: _Optional[int] = ...) -> None: ...

class ChangeInvisibleTimeRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "invisible_time_ms", "undelivered")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    invisible_time_ms: int
    undelivered: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_time_ms: _Optional[int] = ..., undelivered: _Optional[bool] = ...) -> None: ...

class ChangeInvisibleTimeResponse(_message.Message):
    __slots__ = ("code", "remark", "receipt_handle", "invisible_until_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    receipt_handle: str
    invisible_until_ms: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class ForwardToDeadLetterQueueRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ...) -> None: ...

class ForwardToDeadLetterQueueResponse(_message.Message):
    __slots__ = ("code", "remark", "dlq_topic")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    DLQ_TOPIC_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    dlq_topic: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., dlq_topic: _Optional[str] = ...) -> None: ...
