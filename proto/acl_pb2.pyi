from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AclUser(_message.Message):
    __slots__ = ("username", "password", "user_type")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: str
    user_type: str
    def __init__(self, username: _Optional[str] = ..., password: _Optional[str] = ..., user_type: _Optional[str] = ...) -> None: ...

class AclUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class AclListRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: str
    def __init__(self, filter: _Optional[str] = ...) -> None: ...

class AclUserList(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[AclUser]
    def __init__(self, users: _Optional[_Iterable[_Union[AclUser, _Mapping]]] = ...) -> None: ...

class AclEntry(_message.Message):
    __slots__ = ("resource", "actions", "decision")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: str
    def __init__(self, resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[str] = ...) -> None: ...

class AclPolicy(_message.Message):
    __slots__ = ("subject", "entries")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    subject: str
    entries: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, subject: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class AclDeleteRequest(_message.Message):
    __slots__ = ("subject", "resource")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    resource: str
    def __init__(self, subject: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class AclPolicyList(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[AclPolicy]
    def __init__(self, policies: _Optional[_Iterable[_Union[AclPolicy, _Mapping]]] = ...) -> None: ...

class AclCommandResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class AclCopy(_message.Message):
    __slots__ = ("users", "policies", "data_version")
    USERS_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[AclUser]
    policies: _containers.RepeatedCompositeFieldContainer[AclPolicy]
    data_version: _common_pb2.DataVersion
    def __init__(self, users: _Optional[_Iterable[_Union[AclUser, _Mapping]]] = ..., policies: _Optional[_Iterable[_Union[AclPolicy, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class AclAuthorizeRequest(_message.Message):
    __slots__ = ("authorization", "date_time", "authenticate", "authorize", "action", "resources", "method")
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    DATE_TIME_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATE_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    authorization: str
    date_time: str
    authenticate: bool
    authorize: bool
    action: str
    resources: _containers.RepeatedScalarFieldContainer[str]
    method: str
    def __init__(self, authorization: _Optional[str] = ..., date_time: _Optional[str] = ..., authenticate: _Optional[bool] = ..., authorize: _Optional[bool] = ..., action: _Optional[str] = ..., resources: _Optional[_Iterable[str]] = ..., method: _Optional[str] = ...) -> None: ...

class AclAuthorizeResponse(_message.Message):
    __slots__ = ("status", "message", "username")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    username: str
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ..., username: _Optional[str] = ...) -> None: ...
