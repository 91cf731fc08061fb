"""The official RocketMQ 5 Python client, through mqproxy, to a broker whose store fills its disk (a combination no
other test runs): the store on a small tmpfs that a filler file takes to the last byte, as another process would.

Before: the client's sends are taken. While the disk is full: a send fails at once (not after the client's request
timeout) with INTERNAL_SERVER_ERROR, the v2 code upstream's proxy gives the broker's SERVICE_NOT_AVAILABLE, and the
broker's own reason reaches the client; a receive fails at once too (see
:func:`test_the_official_client_is_refused_at_once_on_a_full_disk_and_nothing_is_lost` for why), while the broker
still serves plain reads of everything stored. Once the filler is gone and the broker restarted (README, Disk usage:
a store whose disk filled anyway is started again once there is room; here the store may have fail-stopped when a
consume-queue flush met the full disk), sends are taken again through the same
proxy, and the client receives every acknowledged message, each once, and nothing it was refused. Mounting needs
root (as CI and the developers' machines run), as for the other disk tests."""

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Admin
from proto.v2 import definition_pb2
from tests.cluster import wait_until
from tests.disk.tmpfs import fill_file_system, free_bytes, remove_filler, try_mount_tmpfs, unmount
from tests.proxy.conftest import OfficialClient, ProxyCluster, running_proxy_cluster
from tests.proxy.test_official_client_pop_crash import proxy_pops_on
from tests.proxy.test_official_client_receive import deliveries
from tests.proxy.test_official_client_send import pull_all

MIB = 1 << 20
BEFORE, AFTER = 20, 10  # messages sent before the disk fills, and after the restart
# A refusal's run takes no longer than a successful one plus this: a send held until the client's request timeout
# would take 3 s more, a receive long-polled first 5 s more (--await-s).
PROMPT_S = 2.0
CLIENT_TIMEOUT_S = 60.0  # a client run that outlives this hung
# The client's last line for a refused call: its exception's class, the v2 code, the proxy's message.
CLIENT_ERROR = re.compile(r"^rocketmq\.v5\.exception\.client_exception\.(\w+): (\d+), (.*)$", re.MULTILINE)
# The broker's reasons for refusing writes on a disk filled to the last byte (README, Disk usage): above the refusal
# level, or a fail-stop when one of its own background writes (a dispatcher checkpoint) met the full disk first.
DISK_REFUSAL = re.compile(r"disk full: |the store stopped taking writes: .*No space left on device")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs for the broker's store, as tests/pop/test_pop_disk_full.py mounts it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "24m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    try:
        yield disk
    finally:
        unmount(disk)


def produce(official_client: OfficialClient, endpoint: str, topic: str, count: int,
            prefix: str) -> tuple[dict[str, str], float]:
    """Send ``count`` messages; each acknowledged one's body by message id, and the seconds the run took."""
    started = time.monotonic()
    lines = official_client.run("produce.py", endpoint, topic, count, "--prefix", prefix, timeout=CLIENT_TIMEOUT_S)
    sent = {line["message_id"]: line["body"] for line in lines if "message_id" in line}
    assert len(sent) == count, lines
    return sent, time.monotonic() - started


def refused(official_client: OfficialClient, script: str, *args: object) -> tuple[str, int, str, float]:
    """Run ``script`` expecting the client to raise: its exception's class, v2 code and message, and the seconds
    the run took. Fails if the run succeeds, prints a line (a message sent or received), or fails otherwise."""
    started = time.monotonic()
    with official_client.start(script, *args) as running, pytest.raises(AssertionError, match="exited 1\n") as failed:
        running.finish(CLIENT_TIMEOUT_S)
    elapsed = time.monotonic() - started
    assert not running.lines, failed.value  # nothing sent or received
    errors = CLIENT_ERROR.findall(str(failed.value))
    assert errors, failed.value
    name, code, message = errors[-1]
    return name, int(code), message, elapsed


def store_refusal(namesrv: str, broker_addr: str) -> str:
    """Why the broker refuses writes now ("" while it takes them)."""
    with Admin(namesrv) as admin:
        return admin.broker_runtime_info(broker_addr)["storeRefusal"]


def fill_until_refused(disk: Path, namesrv: str, broker_addr: str) -> str:
    """Take the disk's last byte; the broker's refusal once it noticed (it measures every second)."""
    fill_file_system(disk)
    assert free_bytes(disk) == 0
    return wait_until(lambda: store_refusal(namesrv, broker_addr), timeout=10, interval=0.1,
                      what="the broker refusing writes")


def assert_disk_refusal(name: str, code: int, message: str, *broker_reasons: str) -> None:
    """The client's exception for a call the full disk refused: the broker's SERVICE_NOT_AVAILABLE as upstream's
    proxy maps it, with the broker's reason (one of ``broker_reasons`` where given) in its message."""
    assert (name, code) == ("InternalErrorException", definition_pb2.Code.INTERNAL_SERVER_ERROR), (name, message)
    assert "SERVICE_NOT_AVAILABLE: " in message and DISK_REFUSAL.search(message), message
    assert not broker_reasons or any(reason in message for reason in broker_reasons), (message, broker_reasons)


def restart_with_room(proxy_cluster: ProxyCluster, disk: Path, topic: str) -> None:
    """Delete the filler and restart the broker on its store; back once the proxy pops on it again."""
    remove_filler(disk)
    broker = proxy_cluster.cluster.brokers["broker-a"]
    assert broker.stop() == 0, broker.log()[-3000:]
    assert "Traceback" not in broker.log(), broker.log()[-3000:]
    proxy_cluster.cluster.start_broker("broker-a")
    wait_until(lambda: proxy_pops_on(proxy_cluster, topic, "broker-a"), timeout=45, interval=0.25,
               what="the proxy popping on the restarted broker")


def test_the_official_client_is_refused_at_once_on_a_full_disk_and_nothing_is_lost(
        tmp_path: Path, small_disk: Path, official_client: OfficialClient) -> None:
    """A receive on the full disk fails at once with "disk full" rather than handing messages out: before it
    answers, the broker records what it hands out (the scan offset and the messages in flight, one write to its
    POP state's RocksDB log), so that the invisible time, a later ack and a crash all find it. This broker has
    never popped, so that log is empty and the write needs a page the full disk does not have; handing the
    messages out unrecorded would break those promises, and waiting would only hang the client."""
    with running_proxy_cluster(tmp_path / "cluster", broker_names=("broker-a",), storePathRootDir=small_disk / "store",
                               mappedFileSizeCommitLog=MIB, cleanFileForciblyEnable="false",
                               flushDiskType="SYNC_FLUSH") as proxy_cluster:
        namesrv, endpoint = proxy_cluster.namesrv, proxy_cluster.endpoint
        broker = proxy_cluster.cluster.brokers["broker-a"]
        topic, group = f"ProxyDiskFull_{uuid.uuid4().hex[:8]}", f"disk_full_{uuid.uuid4().hex[:8]}"
        proxy_cluster.cluster.create_topic(topic, queues=2)
        before, took = produce(official_client, endpoint, topic, BEFORE, "before")

        reason = fill_until_refused(small_disk, namesrv, broker.addr)
        name, code, message, send_took = refused(official_client, "produce.py", endpoint, topic, 1,
                                                 "--prefix", "refused")
        assert_disk_refusal(name, code, message, reason, store_refusal(namesrv, broker.addr))
        assert send_took < took + PROMPT_S, f"the refusal took {send_took:.2f}s, a successful run {took:.2f}s"

        name, code, message, receive_took = refused(official_client, "simple_consume.py", endpoint, group, topic,
                                                    "drain", "--expect", BEFORE, "--invisible", 20, "--await-s", 5,
                                                    "--budget", 30)
        assert_disk_refusal(name, code, message)
        assert "disk full: " in message and f"receive from topic {topic} for group {group}" in message, message
        assert receive_took < took + PROMPT_S, f"the refusal took {receive_took:.2f}s, a successful run {took:.2f}s"
        # the broker still serves reads of everything stored, and the proxy and the broker are up
        assert sorted(m.body.decode() for m in pull_all(namesrv, topic)) == sorted(before.values())
        assert free_bytes(small_disk) == 0 and broker.alive and proxy_cluster.proxy.alive

        restart_with_room(proxy_cluster, small_disk, topic)
        after, _ = produce(official_client, endpoint, topic, AFTER, "after")
        lines = official_client.run("simple_consume.py", endpoint, group, topic, "drain", "--expect",
                                    BEFORE + AFTER, "--invisible", 20, "--linger", 3, "--budget", 30,
                                    timeout=CLIENT_TIMEOUT_S)
        received = deliveries(lines, "received", "received-again")
        assert {d["message_id"]: d["body"] for d in received} == before | after
        assert len(received) == BEFORE + AFTER, "a message came twice"
        assert all(d["attempt"] == 1 for d in received), "the refused receive left a message in flight"
        stored = sorted(m.body.decode() for m in pull_all(namesrv, topic))
        assert stored == sorted([*before.values(), *after.values()])  # the refused send was never stored
        for daemon in (proxy_cluster.proxy, proxy_cluster.cluster.brokers["broker-a"]):
            assert "Traceback" not in daemon.log() and "rpc_failed" not in daemon.log(), daemon.log()[-3000:]
