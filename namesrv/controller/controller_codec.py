"""proto/controller.proto messages to and from the controller's records (replica_models)."""

from namesrv.controller.replica_models import Assignment, Heartbeat, SyncStateData
from proto import controller_pb2


def heartbeat_from_proto(pb: controller_pb2.BrokerHeartbeat) -> Heartbeat:
    return Heartbeat(cluster_name=pb.cluster_name, broker_name=pb.broker_name, broker_id=pb.broker_id,
                     broker_addr=pb.broker_addr, ha_addr=pb.ha_addr, master_epoch=pb.master_epoch,
                     max_offset=pb.max_offset, confirm_offset=pb.confirm_offset,
                     election_priority=pb.election_priority, heartbeat_timeout_ms=pb.heartbeat_timeout_ms,
                     seq=pb.seq)


def assignment_to_proto(a: Assignment, heartbeat_seq: int = 0) -> controller_pb2.ReplicaAssignment:
    return controller_pb2.ReplicaAssignment(
        broker_name=a.broker_name, master_id=a.master_id, master_addr=a.master_addr, master_ha_addr=a.master_ha_addr,
        master_epoch=a.master_epoch, sync_state_set=list(a.sync_state_set),
        sync_state_set_epoch=a.sync_state_set_epoch, heartbeat_seq=heartbeat_seq)


def sync_state_data_to_proto(data: SyncStateData) -> controller_pb2.SyncStateData:
    return controller_pb2.SyncStateData(
        cluster_name=data.cluster_name, assignment=assignment_to_proto(data.assignment),
        replicas=[controller_pb2.ReplicaState(
            broker_id=r.broker_id, broker_addr=r.broker_addr, alive=r.alive, master_epoch=r.master_epoch,
            max_offset=r.max_offset, confirm_offset=r.confirm_offset, last_heartbeat_age_ms=r.last_heartbeat_age_ms)
            for r in data.replicas])
