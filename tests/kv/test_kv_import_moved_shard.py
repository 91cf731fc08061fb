"""kvImport into an empty shard that was moved before (its chain has an older item on another broker) was refused as
"already holds data", so a backup could not be restored into a cluster after any remap, drain or rebalance of its
shards. What the shard holds is now read on every item of its chain: empty, it takes the import; holding another
value (here: a deletion's tombstone) it is refused as before."""

from pathlib import Path

import pytest

from client import Admin, KVClient, MQClientError
from common.kv_shard import shard_of
from tests.cluster import make_cluster, wait_until

SETTINGS = {"kvEnable": "true", "registerNameServerPeriod": 1000}
SHARDS = 4


def test_an_empty_shard_moved_before_takes_an_import(tmp_path: Path) -> None:
    source = make_cluster(tmp_path / "source", ("broker-a",), **SETTINGS)
    try:
        with Admin(source.addr) as admin:
            admin.kv_init(SHARDS, brokers=["broker-a"])
        with KVClient(source.addr) as kv:
            wait_until(lambda: kv.shards(refresh=True) == SHARDS, what="the source's shards")
            keys = [k for k in (b"key%d" % i for i in range(60)) if shard_of(k, SHARDS) == 0]
            for k in keys:
                kv.put(k, b"val-" + k)
            snapshot = kv.export_snapshot(0)
    finally:
        source.stop()
    dest = make_cluster(tmp_path / "dest", ("broker-a", "broker-b"), **SETTINGS)
    try:
        with Admin(dest.addr) as admin:
            admin.kv_init(SHARDS, brokers=["broker-a", "broker-b"])
            leader = {q.logic_id: q.leader_broker for q in admin.static_topic_status("rmq_sys_KV").queues}[0]
            admin.migrate_logical_queue("rmq_sys_KV", 0, "broker-b" if leader == "broker-a" else "broker-a")
        with KVClient(dest.addr) as kv:
            wait_until(lambda: kv.shards(refresh=True) == SHARDS, what="the destination's shards")
            assert kv.import_snapshot(snapshot) == len(keys)  # was: "shard 0 already holds data"
            assert kv.get_batch(keys) == [b"val-" + k for k in keys]
            kv.delete(keys[0])  # a tombstone: the shard holds something else than the snapshot now
            with pytest.raises(MQClientError, match="already holds data"):
                kv.import_snapshot(snapshot)
    finally:
        dest.stop()
