"""Tiered storage with controller-mode replicas (broker/tiered/replica/tier_role.py): a replica sharing its master's
backend follows the master's uploads (and keeps on disk only what the master has not uploaded); a replica with a
backend of its own uploads its own copy. Either way its commitlog expires as its master's does, and once the master
is killed the promoted replica serves what only the tier holds and goes on uploading, losing nothing."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, MessageQueue, PullConsumer, PullStatus
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import broker_pb2, broker_pb2_grpc, common_pb2, tiered_pb2, tiered_pb2_grpc
from tests.cluster import wait_static_route, wait_until
from tests.ha.test_controller_failover import (
    QUEUES,
    TOPIC,
    ReplicaGroup,
    consumed_bodies,
    first_acknowledged_send,
    send,
    started_group,
)

BODY = 2000  # bytes: 1,000 messages span eight of the group's 256 KiB commitlog segments
STATIC = "TieredStaticT"  # a static topic whose one logic queue the group leads


@pytest.fixture(params=["shared", "s3", "own"])
def tiered_group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ReplicaGroup, str]]:
    """``shared``: both replicas' tier is one directory (a network mount); ``s3``: one bucket and prefix (a real
    S3-protocol server process), with SYNC_FLUSH, the RocksDB consume queue and the KV store on; ``own``: each
    broker's tier is under its store (the default)."""
    backend: dict[str, object] = {"tieredBackendServiceProvider": "posix"}
    if request.param == "shared":
        backend["tieredStoreFilePath"] = str(tmp_path / "tier")
    elif request.param == "s3":
        backend = {**request.getfixturevalue("s3_server").broker_conf(), "flushDiskType": "SYNC_FLUSH",
                   "storeType": "defaultRocksDB", "kvEnable": "true"}
    for g in started_group(tmp_path, tieredStoreEnable="true", **backend,
                           # small tier segments: the master rolls them while the replica follows
                           tieredStoreCommitLogMaxSize=64 * 1024, tieredStoreConsumeQueueMaxSize=28 * 100,
                           tieredStoreGroupCommitAge=100, fileReservedTime="0.0003", deleteWhen="*",
                           cleanResourceInterval=200):
        yield g, request.param


def send_bodies(g: ReplicaGroup, master: int, prefix: str, n: int) -> list[bytes]:
    acked = []
    for i in range(0, n, 20):
        bodies = [f"{prefix}-{j}-".encode().ljust(BODY, b"x") for j in range(i, i + 20)]
        answer = send(g.replicas[master].addr, (i // 20) % QUEUES, bodies)
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_SLAVE_TIMEOUT), answer.remark
        acked += bodies
    g.wait_replicas_reach_end_of(master)
    return acked


def commit_log_segments(g: ReplicaGroup, broker_id: int) -> int:
    return len(list((g.store(broker_id) / "commitlog").iterdir()))


def upload_lag(addr: str) -> int:
    stub = tiered_pb2_grpc.TieredServiceStub(grpc.insecure_channel(addr))
    status = stub.GetTieredStatus(tiered_pb2.TieredStatusRequest(topic=TOPIC), timeout=5)
    assert status.code == ResponseCode.SUCCESS, status.remark
    return sum(q.upload_lag for q in status.queues)


def static_bodies(g: ReplicaGroup, master: int, n: int) -> list[bytes]:
    """``n`` messages sent to the static topic's logic queue 0 on ``master``."""
    acked = []
    for i in range(0, n, 20):
        bodies = [f"static-{i + j}-".encode().ljust(BODY, b"s") for j in range(20)]
        answer = send(g.replicas[master].addr, 0, bodies, topic=STATIC, addressing=broker_pb2.LOGIC)
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_SLAVE_TIMEOUT), answer.remark
        acked += bodies
    return acked


def holds_static_mapping(addr: str) -> bool:
    stub = broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(addr))
    return any(d.topic == STATIC for d in stub.GetAllTopicQueueMapping(common_pb2.Empty(), timeout=5).details)


def static_consumed(ns: str) -> list[bytes]:
    """The static topic's logic queue 0 from offset 0, as a RocketMQ client reads it."""
    bodies: list[bytes] = []
    with PullConsumer(ns, group="static-reader") as consumer:
        mq, offset = MessageQueue(STATIC, LOGICAL_QUEUE_MOCK_BROKER_NAME, 0), 0
        while (result := consumer.pull(mq, offset, 64)).status is PullStatus.FOUND:
            bodies += [m.body for m in result.messages]
            offset = result.next_begin_offset
    return bodies


def test_a_replica_expires_what_the_tier_holds_and_promoted_serves_it_and_uploads_on(
        tiered_group: tuple[ReplicaGroup, str]):
    """With a static topic's logic queue beside the plain topic: its physical queue is uploaded, expired and
    served from the tier after the failover as any queue, through the logic queue's mapping."""
    g, backend = tiered_group
    with Admin(g.ns.addr) as admin:
        epoch = admin.update_static_topic(STATIC, 1, brokers=["broker-a"]).epoch
    wait_static_route(g.ns.addr, STATIC, epoch)
    wait_until(lambda: send(g.replicas[1].addr, 0, [b"static-first"], topic=STATIC,
                            addressing=broker_pb2.LOGIC).code == ResponseCode.SUCCESS,
               timeout=10, what="the master to take sends to the logic queue")
    static_acked = [b"static-first", *static_bodies(g, 1, 200)]
    acked = send_bodies(g, 1, "before", 1000)
    wait_until(lambda: upload_lag(g.replicas[1].addr) == 0, timeout=20, what="the master to upload everything")
    # The replica's commitlog expires too (before: its uploader, never started, held it at checkpoint 0).
    wait_until(lambda: commit_log_segments(g, 1) <= 2 and commit_log_segments(g, 2) <= 2, timeout=20,
               what="both replicas to expire what the tier holds")
    assert g.info(2)["tieredRole"] == ("own" if backend == "own" else "shared")
    replica_log = g.replicas[2].log()
    if backend != "own":
        assert "tiered_replica_follows_master" in replica_log and "tiered_replica_uploads_own" not in replica_log
    else:
        assert "tiered_replica_uploads_own" in replica_log
        assert list((g.store(2) / "tiered" / "broker-a" / TOPIC).iterdir()), "the replica uploaded nothing"

    # A last burst the master uploads (rolling tier segments) and dies right after: most likely after the replica's
    # last copy of its tier (every 5 s), so the promoted replica must find those segments in the backend.
    acked += send_bodies(g, 1, "late", 300)
    wait_until(lambda: upload_lag(g.replicas[1].addr) == 0, timeout=20, what="the master to upload the burst")
    # Metadata is copied every 5 s (SlaveSynchronize): a static topic made just before its master died is not on
    # the promoted replica, as upstream.
    wait_until(lambda: holds_static_mapping(g.replicas[2].addr), timeout=15,
               what="the replica to copy the static topic's mapping")
    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=15)
    acked.append(b"probe")
    # What only the tier holds now (the local commitlog expired) is served by the promoted replica.
    wait_until(lambda: sorted(consumed_bodies(g.ns.addr)) == sorted(acked), timeout=20,
               what="every message consumable from the promoted replica")
    assert static_consumed(g.ns.addr) == static_acked  # in order, from the tier and the log

    acked += send_bodies(g, 2, "after", 600)
    wait_until(lambda: upload_lag(g.replicas[2].addr) == 0, timeout=20, what="the new master to upload the rest")
    wait_until(lambda: commit_log_segments(g, 2) <= 2, timeout=20, what="the new master to expire what it uploaded")
    seen = consumed_bodies(g.ns.addr)  # all from the tier but the last segment's: nothing truncated, nothing twice
    assert len(seen) == len(acked) and sorted(seen) == sorted(acked)
    assert g.info(2)["tieredRole"] == "master"
    promoted_log = g.replicas[2].log()
    assert "tiered_gap" not in promoted_log and "tiered_units_dangling" not in promoted_log
    if backend != "own":
        assert "tiered_taken_over" in promoted_log


def test_a_replica_killed_and_restarted_follows_its_master_again_and_promoted_serves_everything(
        tiered_group: tuple[ReplicaGroup, str]):
    """SIGKILL of the replica: restarted, it loads its tier as recorded, learns whose backend it is from its
    master's next copy (a shared one: the master's newer uploads are no torn upload of its own; its own: the crash
    checks run on its own tier), catches up and expires again; promoted, it serves everything."""
    g, backend = tiered_group
    acked = send_bodies(g, 1, "before", 600)
    wait_until(lambda: upload_lag(g.replicas[1].addr) == 0, timeout=20, what="the master to upload everything")
    wait_until(lambda: commit_log_segments(g, 2) <= 2, timeout=20, what="the replica to expire what the tier holds")
    g.replicas[2].kill()
    wait_until(lambda: g.in_sync(1, "1"), timeout=10, what="the master to drop the dead replica from the set")
    # Nothing sent while it is down: with ~1 s retention the master would expire the segment the replica stopped
    # in as soon as a send rolled it, and a replica behind its master's log cannot rejoin (as upstream).
    g.start(2)
    wait_until(lambda: g.in_sync(1, "1,2"), timeout=40, what="the restarted replica to rejoin the set")
    wait_until(lambda: (g.info(2) or {}).get("tieredRole") == ("own" if backend == "own" else "shared"),
               timeout=20, what="the restarted replica to learn whose backend its tier is")
    acked += send_bodies(g, 1, "after-restart", 300)
    wait_until(lambda: upload_lag(g.replicas[1].addr) == 0, timeout=20, what="the master to upload the rest")
    wait_until(lambda: commit_log_segments(g, 2) <= 2, timeout=20, what="the restarted replica to expire again")

    g.replicas[1].kill()
    first_acknowledged_send(g.replicas[2].addr, deadline_s=15)
    acked.append(b"probe")
    wait_until(lambda: sorted(consumed_bodies(g.ns.addr)) == sorted(acked), timeout=20,
               what="every message consumable from the promoted replica")
    replica_log = g.replicas[2].log()
    assert "tiered_gap" not in replica_log
    if backend != "own":  # (its own tier may have had an upload torn by the SIGKILL, which recovery mends)
        for damage in ("tiered_units_dangling", "tiered_segment_size_reconciled"):
            assert damage not in replica_log, damage
