"""ACL on the links between daemons: a master and its slave replicate and copy metadata with the inner
credentials; a replication stream or a controller call without them is refused; a KV store provisions itself."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, KVClient, Message, Producer
from client.acl_admin import AclAdmin
from client.errors import MQClientError
from common.acl import sign
from common.kv_shard import KV_TOPIC
from proto import common_pb2, controller_pb2, controller_pb2_grpc, ha_pb2, ha_pb2_grpc
from tests.acl.test_acl_cluster import INNER, NAMESRV_ARGS, ROOT, SETTINGS
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

TOPIC = "AclHaT"


class SignedGroup:
    """A name server with ACL on (and by default the controller); a SYNC_MASTER and its SLAVE with ``settings``
    (by default ACL on with signatures checked)."""

    def __init__(self, workdir: Path, settings: dict[str, object] | None = None,
                 namesrv_args: tuple[str, ...] = (*NAMESRV_ARGS, "--enable-controller")) -> None:
        self.ns = start_namesrv(workdir / "namesrv", *namesrv_args)
        self.settings = settings or {**SETTINGS, "brokerNotActiveTimeoutMillis": 3000, "kvEnable": "true"}
        self.daemons: list[Daemon] = [self.ns]
        self.master = self._start(workdir / "master", brokerRole="SYNC_MASTER")
        self.ha_addr = self.runtime(self.master)["haServerAddr"]
        self.slave = self._start(workdir / "slave", brokerId=1, brokerRole="SLAVE", haMasterAddress=self.ha_addr)

    def _start(self, workdir: Path, **settings: object) -> Daemon:
        daemon = start_broker(workdir, "broker-a", self.ns.addr, **self.settings, **settings)
        self.daemons.append(daemon)
        return daemon

    def runtime(self, broker: Daemon) -> dict[str, str]:
        with Admin(self.ns.addr, credentials=ROOT) as admin:
            return admin.broker_runtime_info(broker.addr)

    def stop(self) -> None:
        for d in reversed(self.daemons):
            if d.alive:
                d.stop(strict=False)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedGroup]:
    g = SignedGroup(tmp_path_factory.mktemp("acl-ha"))
    try:
        wait_until(lambda: g.runtime(g.master)["haSlaves"] == "1", timeout=20, what="the slave to connect (signed)")
        yield g
    finally:
        g.stop()


def test_replication_and_metadata_sync_run_with_the_inner_credentials(group: SignedGroup) -> None:
    with Admin(group.ns.addr, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: TOPIC in admin.topic_list(), what="topic routed")
        with Producer(group.ns.addr, credentials=ROOT) as producer:  # SYNC_MASTER: acknowledged = on the slave
            producer.send(Message(TOPIC, b"replicated"))
        end = int(group.runtime(group.master)["commitLogMaxOffset"])
        assert int(group.runtime(group.slave)["commitLogMaxOffset"]) >= end

        def slave_has_topic() -> bool:  # the slave copies its master's metadata (admin calls: signed)
            configs = admin.client.broker(group.slave.addr).GetAllTopicConfig(
                common_pb2.Empty(), timeout=5, metadata=sign(*ROOT)).configs
            return any(c.topic_name == TOPIC for c in configs)
        wait_until(slave_has_topic, timeout=20, what="the slave to copy the topic config")


def refused_replication(addr: str, metadata: list[tuple[str, str]] | None) -> grpc.RpcError:
    """A stranger's replication stream to ``addr`` (a slave's handshake signed with ``metadata``): its refusal."""
    hello = ha_pb2.ReplicaHandshake(cluster_name="DefaultCluster", broker_name="broker-a", broker_id=7,
                                    commit_log_end=0, mapped_file_size=1 << 30)
    with grpc.insecure_channel(addr) as channel, pytest.raises(grpc.RpcError) as err:
        list(ha_pb2_grpc.HaServiceStub(channel).Replicate(iter([ha_pb2.ReplicaFrame(handshake=hello)]), timeout=5,
                                                          metadata=metadata))
    return err.value


def test_a_replication_stream_without_the_inner_credentials_is_refused(group: SignedGroup) -> None:
    for metadata in (None, sign("nobody", "guess"), sign(INNER[0], "not-the-secret")):
        err = refused_replication(group.ha_addr, metadata)
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, err.details()
        assert INNER[1] not in err.details()


def test_a_controller_call_without_the_inner_credentials_is_refused(group: SignedGroup) -> None:
    request = controller_pb2.AlterSyncStateSetRequest(broker_name="broker-a", master_id=0, new_sync_state_set=[0])
    with grpc.insecure_channel(group.ns.addr) as channel, pytest.raises(grpc.RpcError) as err:
        controller_pb2_grpc.ControllerServiceStub(channel).AlterSyncStateSet(request, timeout=5)
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED, err.value.details()


def test_the_kv_store_provisions_itself_with_the_inner_credentials(group: SignedGroup) -> None:
    with KVClient(group.ns.addr, credentials=ROOT) as kv:
        kv.put(b"signed-key", b"v")
        assert kv.get(b"signed-key") == b"v"


def test_kv_writes_and_reads_on_their_streams_need_pub_and_sub_on_the_kv_topic(group: SignedGroup) -> None:
    with Admin(group.ns.addr, credentials=ROOT) as admin:
        acl = AclAdmin(admin)
        for user, action in (("kv-reader", "Sub"), ("kv-writer", "Pub")):
            acl.create_user(user, f"{user}-secret", cluster="DefaultCluster")
            acl.create_acl(f"User:{user}", [f"Topic:{KV_TOPIC}"], [action], "Allow", cluster="DefaultCluster")
    with KVClient(group.ns.addr, credentials=ROOT) as root:
        root.put(b"read-only-key", b"v")
    with KVClient(group.ns.addr, credentials=("kv-reader", "kv-reader-secret")) as reader:
        assert reader.get(b"read-only-key") == b"v"
        with pytest.raises(MQClientError, match=f"no Pub permission on Topic:{KV_TOPIC}"):
            reader.put(b"read-only-key", b"overwritten")
        assert reader.get(b"read-only-key") == b"v"
    with KVClient(group.ns.addr, credentials=("kv-writer", "kv-writer-secret")) as writer:
        writer.put(b"write-only-key", b"w")
        with pytest.raises(MQClientError, match=f"no Sub permission on Topic:{KV_TOPIC}"):
            writer.get_batch([b"write-only-key", b"read-only-key"])


def test_a_broker_in_controller_mode_is_elected_through_signed_controller_calls(group: SignedGroup,
                                                                                  tmp_path: Path) -> None:
    replica = start_broker(tmp_path, "broker-c", group.ns.addr, **group.settings, brokerId=1,
                           enableControllerMode="true", controllerAddr=group.ns.addr,
                           controllerHeartBeatTimeoutMills=3000)
    group.daemons.append(replica)
    wait_until(lambda: group.runtime(replica).get("replicaRole") == "MASTER", timeout=20,
               what="the controller to elect broker-c's only replica (its session is signed)")
