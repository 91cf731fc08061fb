"""KV shards remapped between brokers while reads and writes run: every acknowledged key stays readable and
ends with its last acknowledged value (issue 6, distribution)."""

import random
import threading
import time
from pathlib import Path

import pytest

from client import Admin, KVClient, MQClientError
from tests.cluster import make_cluster, wait_until

KEYS = 10_000
SHARDS = 8
BROKERS = ("broker-a", "broker-b", "broker-c")
REMAPS = (["broker-b", "broker-c"], ["broker-c", "broker-a"], ["broker-a", "broker-b"])


def key(i: int) -> bytes:
    return b"key-%05d" % i


def fill(addr: str, keys: range, threads: int = 8) -> None:
    def work(part: range) -> None:
        with KVClient(addr) as kv:
            for i in part:
                kv.put(key(i), b"v0-%d" % i)

    parts = [keys[t::threads] for t in range(threads)]
    workers = [threading.Thread(target=work, args=(p,)) for p in parts]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


class Writer(threading.Thread):
    """Overwrites keys it owns; remembers the last acknowledged value, and the value of a failed put (which
    may or may not have applied)."""

    def __init__(self, addr: str, owned: list[int], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.owned, self.stop = addr, owned, stop
        self.acked: dict[int, bytes] = {i: b"v0-%d" % i for i in owned}
        self.unknown: dict[int, bytes] = {}
        self.writes = 0

    def run(self) -> None:
        rnd = random.Random(len(self.owned))
        with KVClient(self.addr) as kv:
            n = 0
            while not self.stop.is_set():
                i = rnd.choice(self.owned)
                n += 1
                value = b"v%d-%d" % (n, i)
                try:
                    kv.put(key(i), value)
                except MQClientError:
                    self.unknown[i] = value
                    continue
                self.acked[i] = value
                self.unknown.pop(i, None)
                self.writes += 1


class Reader(threading.Thread):
    def __init__(self, addr: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.stop = addr, stop
        self.absent: list[bytes] = []
        self.errors: list[str] = []
        self.reads = 0

    def run(self) -> None:
        rnd = random.Random(7)
        with KVClient(self.addr) as kv:
            while not self.stop.is_set():
                batch = [key(rnd.randrange(KEYS)) for _ in range(64)]
                try:
                    values = kv.get_batch(batch)
                except MQClientError as exc:
                    self.errors.append(str(exc))
                    continue
                self.absent += [k for k, v in zip(batch, values, strict=True) if v is None]
                self.reads += len(batch)


@pytest.mark.slow
def test_remap_keeps_every_acknowledged_key_readable(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path, BROKERS, kvEnable="true")
    try:
        with Admin(cluster.addr) as admin:
            admin.kv_init(SHARDS, brokers=list(BROKERS[:2]))
            with KVClient(cluster.addr) as kv:
                wait_until(lambda: kv.shards(refresh=True) == SHARDS, what="KV route")
            fill(cluster.addr, range(KEYS))
            stop = threading.Event()
            writers = [Writer(cluster.addr, list(range(w, KEYS, 2)), stop) for w in range(2)]
            readers = [Reader(cluster.addr, stop) for _ in range(2)]
            for t in (*writers, *readers):
                t.start()
            leaders_seen = []
            for targets in REMAPS:
                time.sleep(0.5)  # let reads and writes run against the current placement
                admin.remap_static_topic("rmq_sys_KV", brokers=targets)
                status = admin.static_topic_status("rmq_sys_KV")
                assert status is not None
                leaders_seen.append({q.logic_id: q.leader_broker for q in status.queues})
            time.sleep(0.5)
            stop.set()
            for t in (*writers, *readers):
                t.join(timeout=30)
        # the shards really moved: every remap put every shard on its targets
        for targets, leaders in zip(REMAPS, leaders_seen, strict=True):
            assert set(leaders.values()) <= set(targets), leaders
        assert sum(r.reads for r in readers) > 0 and sum(w.writes for w in writers) > 0
        assert not [r.absent for r in readers if r.absent], "an acknowledged key read as absent"
        assert not [r.errors for r in readers if r.errors]
        with KVClient(cluster.addr) as kv:
            final = {}
            for start in range(0, KEYS, 500):
                ids = range(start, min(start + 500, KEYS))
                final.update(zip(ids, kv.get_batch([key(i) for i in ids]), strict=True))
        for w in writers:
            for i in w.owned:
                allowed = {w.acked[i], w.unknown.get(i)}
                assert final[i] in allowed, (i, final[i], w.acked[i])
    finally:
        cluster.stop()
