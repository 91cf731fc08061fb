"""A slave whose disk refused its master's bytes (ENOSPC) stopped replicating for good: once the disk had room again
it still never asked its master for more, and looked healthy. It now pauses, says so (``haRefusal``, the
``rocketmq_ha_replication_stopped`` gauge), asks again every few seconds, and catches up once there is room. A real
tmpfs under the slave's store (root), as the other disk-full tests."""

import os
from pathlib import Path

from client import Admin, Message, Producer
from tests.cluster import start_broker, wait_until
from tests.disk.tmpfs import fill_file_system, remove_filler, try_mount_tmpfs, unmount
from tests.ha.test_replication import TOPIC, Group, runtime


def test_a_slave_whose_disk_filled_catches_up_once_it_has_room(tmp_path: Path) -> None:
    disk = tmp_path / "slave-disk"
    disk.mkdir()
    assert try_mount_tmpfs(disk, "16m"), f"cannot mount a tmpfs on {disk} (uid {os.geteuid()}: needs root)"
    g = Group(tmp_path, "ASYNC_MASTER", with_slave=False)
    try:
        g.slave = start_broker(tmp_path / "slave", "broker-a", g.ns.addr, brokerId=1, brokerRole="SLAVE",
                               haMasterAddress=g.ha_addr, storePathRootDir=disk / "store",
                               cleanFileForciblyEnable="false", **g.settings)
        with Admin(g.ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=1, write_queue_nums=1)
            wait_until(lambda: TOPIC in admin.topic_list(), what="the topic's route")
        wait_until(lambda: runtime(g.ns.addr, g.master)["haSlaves"] == "1", what="the slave to connect")
        fill_file_system(disk)  # not a byte left for the slave's next segment
        with Producer(g.ns.addr) as producer:
            for _ in range(3):
                producer.send_batch([Message(TOPIC, b"x" * 1024) for _ in range(64)])
        refusal = wait_until(lambda: runtime(g.ns.addr, g.slave).get("haRefusal"), timeout=20,
                             what="the slave to say its replication is refused")
        assert "No space left" in refusal, refusal
        master_end, slave_end = g.ends()
        assert slave_end < master_end
        # Asked again (every few seconds) and refused again: no "resumed" at the master's welcome, nor a refusal
        # cleared meanwhile, nor a line a retry (three lines each 5 s, one saying resumed: the disk-full review)
        starts = g.slave.log().count("replication_started")
        wait_until(lambda: g.slave.log().count("replication_started") > starts, timeout=20, what="a retry")
        assert "No space left" in runtime(g.ns.addr, g.slave).get("haRefusal", "")
        assert "replication_resumed" not in g.slave.log() and g.slave.log().count("replication_paused") == 1
        assert "Traceback" not in g.slave.log()  # (the metadata copy logged one every 200 ms)
        remove_filler(disk)
        wait_until(lambda: g.ends()[1] == g.ends()[0], timeout=30,
                   what="the slave to catch up once its disk has room")  # never, before
        assert not runtime(g.ns.addr, g.slave).get("haRefusal")
        assert "replication_resumed" in g.slave.log()
    finally:
        g.stop()
        unmount(disk)
