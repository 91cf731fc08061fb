"""mqadmin reads a broker group from its slave while the group has no live master (slaveReadEnable), as upstream's
selectBrokerAddr does, and says so: topicStatus printed a header only and exited 0, consumerProgress said the group
had no offsets though the slave holds them, queryMsgByOffset found no live master. Rows a slave answered carry
``"from_slave": true`` in --json and a note under the human table (a master's rows are as before). A real master
and slave."""

import os
import signal
from pathlib import Path

import grpc

from client import Admin, Message, Producer, PullConsumer
from proto import broker_pb2_grpc, common_pb2
from tests.admin_cli.helpers import ok, ok_json, table_lines, wait_route
from tests.cluster import Daemon, start_broker, start_namesrv, wait_until

TOPIC, GROUP = "SlaveReadT", "slave-read-g"


def runtime(namesrv: str, addr: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in ok_json(namesrv, "brokerStatus", "-b", addr)}


def slave_offset(addr: str) -> int:
    """GROUP's offset on TOPIC/0 as the slave copied it (-1 until it has)."""
    with grpc.insecure_channel(addr) as channel:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).GetAllConsumerOffsets(common_pb2.Empty(), timeout=5)
    return next((e.offset for e in answer.offsets if (e.group, e.topic, e.queue_id) == (GROUP, TOPIC, 0)), -1)


def test_a_group_without_a_live_master_is_read_from_its_slave(tmp_path: Path) -> None:
    namesrv = start_namesrv(tmp_path / "namesrv")
    daemons: list[Daemon] = [namesrv]
    try:
        ns = namesrv.addr
        master = start_broker(tmp_path / "m", "broker-a", ns, slaveReadEnable="true")
        daemons.append(master)
        ha_addr = wait_until(lambda: runtime(ns, master.addr).get("haServerAddr"), what="master's ha address")
        slave = start_broker(tmp_path / "s", "broker-a", ns, brokerRole="SLAVE", brokerId=1, haMasterAddress=ha_addr,
                             slaveReadEnable="true")
        daemons.append(slave)
        wait_until(lambda: runtime(ns, master.addr).get("haSlaves") == "1", what="slave connected")
        ok(ns, "updateTopic", "-t", TOPIC, "-b", "broker-a", "-r", "1", "-w", "1")
        wait_route(ns, TOPIC, ["broker-a"])
        with Producer(ns) as producer:
            for i in range(20):
                producer.send(Message(TOPIC, b"m%d" % i))
        with PullConsumer(ns, group=GROUP) as consumer:
            consumer.commit(consumer.queues(TOPIC)[0], 7)
        wait_until(lambda: slave_offset(slave.addr) == 7, timeout=20, what="the slave's copy of the offsets")

        rows = ok_json(ns, "consumerProgress", "-g", GROUP)  # the master answers: no slave note
        assert [(r["broker_offset"], r["consumer_offset"]) for r in rows] == [(20, 7)]
        assert all("from_slave" not in r for r in rows)  # a master's rows keep their documented keys
        assert "slave" not in ok(ns, "consumerProgress", "-g", GROUP)

        # A master that does not answer (paused) is read past too: DEADLINE_EXCEEDED, where it was UNAVAILABLE only.
        os.kill(master.proc.pid, signal.SIGSTOP)
        try:
            status = ok_json(ns, "--timeout", "1500", "topicStatus", "-t", TOPIC)  # was: exit 1, DEADLINE_EXCEEDED
            assert [(r["broker_name"], r["max_offset"], r["from_slave"]) for r in status] == [("broker-a", 20, True)]
        finally:
            os.kill(master.proc.pid, signal.SIGCONT)

        master.stop()
        with Admin(ns) as admin:
            wait_until(lambda: [(b.broker_name, b.broker_id) for b in admin.all_brokers()] == [("broker-a", 1)],
                       what="the master gone from the cluster info")

        rows = ok_json(ns, "consumerProgress", "-g", GROUP)  # was: "consumer group ... has no offsets"
        assert [(r["broker_name"], r["queue_id"], r["broker_offset"], r["consumer_offset"], r["diff"],
                 r["from_slave"]) for r in rows] == [("broker-a", 0, 20, 7, 13, True)]
        text = ok(ns, "consumerProgress", "-g", GROUP, "-t", TOPIC)
        assert table_lines(text, TOPIC, "broker-a", "20", "7", "13")
        assert "answered by a slave: broker-a by its slave (BID 1)" in text

        status = ok_json(ns, "topicStatus", "-t", TOPIC)  # was: a header only, exit 0
        assert [(r["broker_name"], r["queue_id"], r["max_offset"], r["from_slave"]) for r in status] == [
            ("broker-a", 0, 20, True)]
        text = ok(ns, "topicStatus", "-t", TOPIC)
        assert table_lines(text, "broker-a", "0", "20") and "broker-a by its slave (BID 1)" in text

        found = ok_json(ns, "queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "3")
        assert (found["queue_offset"], found["body_preview"], found["from_slave"]) == (3, "m3", True)
        assert "broker-a by its slave (BID 1)" in ok(ns, "queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i",
                                                     "0", "-o", "3")
    finally:
        for daemon in reversed(daemons):
            if daemon.alive:
                daemon.stop(strict=False)
