"""A replica's copy of its master's ACL tables in a rolling upgrade: a master that predates GetAclCopy gives none (the
replica keeps its own and says so when elected); and the first copy a broker applies since it started replaces
tables that may be its own (an old master rejoining as a replica of one elected so): what it drops is kept in a
file and said. Before, those users and policies were lost for good (the upgrade review: alice, made on the old
master, was gone everywhere)."""

import json
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from broker.acl_manager import AclManager
from broker.ha.slave_synchronize import SlaveSynchronize
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.metadata_store import open_metadata_stores
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import StoreType
from common.acl import User
from proto import acl_pb2, acl_pb2_grpc, broker_pb2_grpc
from tests.ha.test_slave_synchronize_fence import FakeMaster, Tables


class FakeAcl(acl_pb2_grpc.AclServiceServicer):
    def __init__(self) -> None:
        self.copy = acl_pb2.AclCopy()

    def GetAclCopy(self, request, context):
        return self.copy


def _serve(with_acl: FakeAcl | None) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(FakeMaster(Tables(["T"])), server)
    if with_acl is not None:
        acl_pb2_grpc.add_AclServiceServicer_to_server(with_acl, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[tuple[AclManager, SlaveSynchronize]]:
    stores = open_metadata_stores(StoreType.DEFAULT, tmp_path)
    assert stores.users is not None and stores.acls is not None
    acl = AclManager(stores.users, stores.acls, kept_dir=tmp_path / "config")
    acl.load(("root", "pw"))
    acl.put_user(User("alice", "alice-pw"))  # made here while this broker was its group's master
    config = tmp_path / "config"
    managers = TopicConfigManager(config), SubscriptionGroupManager(config), ConsumerOffsetManager(config)
    for manager in managers:
        manager.load()
    yield acl, SlaveSynchronize(lambda: "", *managers, lambda: None, acl=acl)
    stores.close()


def test_a_master_that_predates_acl_copies_leaves_the_replica_its_own_tables_marked_unconfirmed(replica) -> None:
    acl, sync = replica
    server, addr = _serve(None)
    try:
        sync.sync_all(addr)
    finally:
        server.stop(grace=0)
    assert sorted(acl.users) == ["alice", "root"] and acl.unconfirmed


def test_the_first_copy_keeps_the_replicas_own_users_it_drops_in_a_file(replica, tmp_path: Path) -> None:
    acl, sync = replica
    fake = FakeAcl()
    fake.copy = acl_pb2.AclCopy(users=[acl_pb2.AclUser(username="root", password="pw", user_type="Super"),
                                       acl_pb2.AclUser(username="bob", password="bob-pw")])
    server, addr = _serve(fake)
    try:
        sync.sync_all(addr)
        assert sorted(acl.users) == ["bob", "root"]  # the master's tables are the group's
        (kept,) = (tmp_path / "config").glob("acl-replaced-*.json")
        assert [u["username"] for u in json.loads(kept.read_text())["users"]] == ["alice"]
        assert kept.stat().st_mode & 0o777 == 0o600
        del fake.copy.users[1]  # deleteUser bob on the master: a later copy drops him, keeping nothing
        sync.sync_all(addr)
        assert sorted(acl.users) == ["root"] and len(list((tmp_path / "config").glob("acl-replaced-*"))) == 1
    finally:
        server.stop(grace=0)
