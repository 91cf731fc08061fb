from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BrokerHeartbeat(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "ha_addr", "master_epoch", "max_offset", "confirm_offset", "election_priority", "heartbeat_timeout_ms", "seq")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str
    master_epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    heartbeat_timeout_ms: int
    seq: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., ha_addr: _Optional[str] = ..., master_epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., election_priority: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class ReplicaAssignment(_message.Message):
    __slots__ = ("broker_name", "master_id", "master_addr", "master_ha_addr", "master_epoch", "sync_state_set", "sync_state_set_epoch", "heartbeat_seq")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SEQ_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    master_id: int
    master_addr: str
    master_ha_addr: str
    master_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    heartbeat_seq: int
    def __init__(self, broker_name: _Optional[str] = ..., master_id: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_ha_addr: _Optional[str] = ..., master_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ..., heartbeat_seq: _Optional[int] = ...) -> None: ...

class AlterSyncStateSetRequest(_message.Message):
    __slots__ = ("broker_name", "master_id", "master_epoch", "sync_state_set_epoch", "new_sync_state_set")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    master_id: int
    master_epoch: int
    sync_state_set_epoch: int
    new_sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_name: _Optional[str] = ..., master_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., new_sync_state_set: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectMasterRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class GetSyncStateDataRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class ReplicaState(_message.Message):
    __slots__ = ("broker_id", "broker_addr", "alive", "master_epoch", "max_offset", "confirm_offset", "last_heartbeat_age_ms")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_addr: str
    alive: bool
    master_epoch: int
    max_offset: int
    confirm_offset: int
    last_heartbeat_age_ms: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., alive: _Optional[bool] = ..., master_epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., last_heartbeat_age_ms: _Optional[int] = ...) -> None: ...

class SyncStateData(_message.Message):
    __slots__ = ("cluster_name", "assignment", "replicas")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    assignment: ReplicaAssignment
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    def __init__(self, cluster_name: _Optional[str] = ..., assignment: _Optional[_Union[ReplicaAssignment, _Mapping]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ...) -> None: ...
