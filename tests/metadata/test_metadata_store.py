"""Both metadata backends (JSON files, RocksDB) behind the managers: same behaviour, checked on both."""

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata.metadata_codec import EMPTY_ATTRIBUTES, OFFSETS, TOPICS, decode_offsets, encode_offset_key
from broker.metadata.metadata_store import MetadataStore
from broker.metadata.rocksdb_metadata_store import RocksDBMetadata, prefix_end
from broker.metadata.subscription_group_manager import SubscriptionGroupConfig
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import StoreType
from common.topic_config import TopicConfig
from tests.cluster import REPO
from tests.metadata.helpers import BACKENDS, Managers, open_managers


@pytest.fixture(params=BACKENDS)
def store_type(request: pytest.FixtureRequest) -> StoreType:
    return request.param


@pytest.fixture
def managers(store_type: StoreType, tmp_path: Path) -> Iterator[Managers]:
    m = open_managers(store_type, tmp_path)
    yield m
    m.stores.close()


def reopen(m: Managers, store_type: StoreType, root: Path) -> Managers:
    m.close()
    return open_managers(store_type, root)


def topics_of(m: Managers) -> dict[str, TopicConfig]:
    return {c.topic_name: c for c in m.topics.all_configs()}


# -- topics ------------------------------------------------------------------------------------------------------
def test_topics_survive_reopen(managers: Managers, store_type: StoreType, tmp_path: Path):
    m = managers
    m.topics.update(TopicConfig("A", 4, 4))
    m.topics.update(TopicConfig("B", 2, 3, perm=2, topic_sys_flag=-7, order=True, attributes={"+k": "v", "x": ""}))
    m.topics.update_many([TopicConfig(f"batch-{i}", 1, 1) for i in range(50)])
    m.topics.update(TopicConfig("A", 8, 16))  # replaced
    assert m.topics.delete("batch-7")
    assert not m.topics.delete("never-was")
    before = topics_of(m)
    assert len(before) == 51 and before["A"].write_queue_nums == 16

    m = reopen(m, store_type, tmp_path)
    try:
        assert topics_of(m) == before
        b = m.topics.select("B")
        assert (b.perm, b.topic_sys_flag, b.order, b.attributes) == (2, -7, True, {"+k": "v", "x": ""})
        assert m.topics.select("batch-7") is None
    finally:
        m.stores.close()


def test_loaded_topics_share_one_empty_attribute_map(managers: Managers, store_type: StoreType, tmp_path: Path):
    managers.topics.update_many([TopicConfig(f"t{i}", attributes={}) for i in range(3)])
    m = reopen(managers, store_type, tmp_path)
    try:
        configs = m.topics.all_configs()
        assert all(c.attributes is EMPTY_ATTRIBUTES for c in configs)
        with pytest.raises(TypeError):
            configs[0].attributes["k"] = "v"
        assert EMPTY_ATTRIBUTES == {}
    finally:
        m.stores.close()


def test_batch_is_validated_first_and_changes_nothing_when_one_is_bad(managers: Managers, store_type: StoreType,
                                                                      tmp_path: Path):
    m = managers
    m.topics.update(TopicConfig("keep", 1, 1))
    for bad in ([TopicConfig("ok1"), TopicConfig("bad name")], [TopicConfig("ok1"), TopicConfig("ok2", 0, 1)],
                [TopicConfig("dup"), TopicConfig("dup")]):
        counter = m.topics.data_version.counter
        with pytest.raises(ValueError):
            m.topics.update_many(bad)
        assert set(topics_of(m)) == {"keep"}
        assert m.topics.data_version.counter == counter
    m = reopen(m, store_type, tmp_path)
    try:
        assert set(topics_of(m)) == {"keep"}
    finally:
        m.stores.close()


def test_change_log_sends_only_what_changed(managers: Managers):
    t = managers.topics
    t.update_many([TopicConfig(f"old-{i}") for i in range(10)])
    base = t.data_version.counter
    t.update_many([TopicConfig(f"new-{i}") for i in range(1000)])
    assert t.data_version.counter == base + 1, "a batch is one change"
    changed, deleted = t.changes_since(base)
    assert sorted(c.topic_name for c in changed) == sorted(f"new-{i}" for i in range(1000)) and deleted == []
    mid = t.data_version.counter
    t.delete("old-3")
    t.update(TopicConfig("new-5", 2, 2))
    changed, deleted = t.changes_since(mid)
    assert [(c.topic_name, c.read_queue_nums) for c in changed] == [("new-5", 2)] and deleted == ["old-3"]
    assert t.changes_since(t.data_version.counter) == ([], [])


def test_the_change_log_keeps_one_entry_a_topic_and_answers_the_same(managers: Managers):
    """It grew by an entry a change for good (200,000 updates of one topic held 9.7 MB); compacted to each topic's
    latest change, it answers every ``changes_since`` as before."""
    t = managers.topics
    t.update_many([TopicConfig(f"t-{i}") for i in range(10)])
    base = t.data_version.counter
    for n in range(1200):  # past the first compaction (after 1,024 entries more than twice the last one's)
        t.update(TopicConfig("hot", 1 + n % 3, 1 + n % 3))
    t.delete("t-3")
    assert len(t._change_topics) <= 2 * 11 + 1024 + 1
    changed, deleted = t.changes_since(base)
    assert [c.topic_name for c in changed] == ["hot"] and deleted == ["t-3"]
    changed, _ = t.changes_since(0)
    assert sorted(c.topic_name for c in changed) == sorted(["hot", *(f"t-{i}" for i in range(10) if i != 3)])
    assert t.changes_since(t.data_version.counter) == ([], [])


class FailingStore(MetadataStore):
    def load(self):
        return iter(())

    def put(self, values):
        raise OSError("disk full")

    def delete(self, keys):
        raise OSError("disk full")

    def delete_prefix(self, key_prefix):
        raise OSError("disk full")


def test_a_failed_write_leaves_the_table_as_it_was():
    t = TopicConfigManager(FailingStore())
    t.topic_config_table["A"] = TopicConfig("A", 1, 1)
    for call in (lambda: t.update(TopicConfig("A", 2, 2)), lambda: t.update_many([TopicConfig("B")]),
                 lambda: t.delete("A")):
        with pytest.raises(OSError):
            call()
        assert list(t.topic_config_table.values()) == [TopicConfig("A", 1, 1)]
    assert t.changes_since(0) == ([], [])


# -- subscription groups -----------------------------------------------------------------------------------------
def test_groups_survive_reopen(managers: Managers, store_type: StoreType, tmp_path: Path):
    m = managers
    m.groups.update(SubscriptionGroupConfig("G1", consume_enable=False, retry_queue_nums=3, retry_max_times=5,
                                            broker_id=2))
    assert m.groups.find("G-auto") == SubscriptionGroupConfig("G-auto")  # auto-created and stored
    m.groups.update(SubscriptionGroupConfig("G3"))
    assert m.groups.delete("G3") and not m.groups.delete("G3")
    before = dict(m.groups.subscription_group_table)
    m = reopen(m, store_type, tmp_path)
    try:
        assert m.groups.subscription_group_table == before
        assert set(before) == {"G1", "G-auto"}
    finally:
        m.stores.close()


# -- offsets -----------------------------------------------------------------------------------------------------
def test_offsets_survive_reopen_and_topic_delete_removes_only_that_topic(managers: Managers, store_type: StoreType,
                                                                          tmp_path: Path):
    o = managers.offsets
    for topic in ("T", "T1", "T-2"):  # "T" is a prefix of the others' names: deleting it must spare them
        for q in range(3):
            o.commit_offset("G", topic, q, 10 + q)
            o.commit_offset("G2", topic, q, 20 + q)
    o.commit_offset("G", "T", 0, 99)
    o.commit_offset("G", "T", 1000, 1 << 40)
    o.delete_topic("T")
    assert o.query_offset("G", "T", 0) == -1 and o.topics_of_group("G") == ["T-2", "T1"]
    m = reopen(managers, store_type, tmp_path)
    try:
        o = m.offsets
        assert o.query_offset("G", "T", 0) == -1 and o.query_offset("G", "T", 1000) == -1
        assert [o.query_offset("G", "T1", q) for q in range(3)] == [10, 11, 12]
        assert [o.query_offset("G2", "T-2", q) for q in range(3)] == [20, 21, 22]
        assert o.topics_of_group("G2") == ["T-2", "T1"]
    finally:
        m.stores.close()


# -- kill without shutdown -----------------------------------------------------------------------------------------
KILL_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from broker.metadata.subscription_group_manager import SubscriptionGroupConfig
    from common.topic_config import TopicConfig
    from broker.store.config import StoreType
    from tests.metadata.helpers import open_managers

    m = open_managers(StoreType(sys.argv[1]), Path(sys.argv[2]))
    m.topics.update(TopicConfig("Killed", 3, 3))
    m.topics.update_many([TopicConfig(f"KB{i}") for i in range(100)])
    m.groups.update(SubscriptionGroupConfig("KG", retry_max_times=7))
    m.offsets.delete_topic("Gone")
    m.offsets.commit_offset("KG", "Killed", 2, 1234)
    m.offsets.commit_offset("KG", "Killed", 1, 5)
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close
""")


def run_killed_child(script: str, store_type: StoreType, tmp_path: Path) -> None:
    """``script`` changes the managers at ``tmp_path`` and SIGKILLs itself: nothing it wrote is closed cleanly."""
    proc = subprocess.run([sys.executable, "-c", script, store_type, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr


def test_changes_written_through_survive_a_kill(store_type: StoreType, tmp_path: Path):
    """Topics, groups and a topic's deleted offsets are on disk when the call returns in both backends; committed
    offsets only where the store writes through (RocksDB): the JSON backend keeps them for its timer, as it always
    did."""
    setup = open_managers(store_type, tmp_path)
    setup.offsets.commit_offset("KG", "Gone", 0, 1)
    setup.close()
    run_killed_child(KILL_CHILD, store_type, tmp_path)
    m = open_managers(store_type, tmp_path)
    try:
        assert m.topics.select("Killed") == TopicConfig("Killed", 3, 3)
        assert all(m.topics.select(f"KB{i}") is not None for i in range(100))
        assert m.groups.subscription_group_table["KG"].retry_max_times == 7
        written_through = m.stores.offsets.write_through
        assert written_through == (store_type is StoreType.DEFAULT_ROCKSDB)
        expected = (1234, 5, -1) if written_through else (-1, -1, -1)
        assert (m.offsets.query_offset("KG", "Killed", 2), m.offsets.query_offset("KG", "Killed", 1),
                m.offsets.query_offset("KG", "Gone", 0)) == expected
    finally:
        m.stores.close()


# -- RocksDB: one small write per change -----------------------------------------------------------------------------
class SpyDB:
    """Counts the calls that reach the database."""

    def __init__(self, db) -> None:
        self.db = db
        self.calls: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self.db, name)
        if name in ("put", "delete", "write", "delete_range"):
            def spy(*args, **kwargs):
                self.calls.append(name)
                return attr(*args, **kwargs)
            return spy
        return attr


def test_rocksdb_writes_one_small_record_per_change_whatever_the_table_size(tmp_path: Path):
    metadata = RocksDBMetadata.open(tmp_path / "metadata")
    try:
        spy = SpyDB(metadata.db)
        metadata.database.db = spy  # every table's writes go through the one database
        stores = metadata.stores()
        topics = TopicConfigManager(stores.topics)
        topics.update_many([TopicConfig(f"T{i}", 1, 1) for i in range(20_000)])
        assert spy.calls == ["write"]
        spy.calls.clear()
        topics.update(TopicConfig("T5", 2, 2))
        topics.delete("T6")
        assert spy.calls == ["put", "delete"]
        spy.calls.clear()
        from broker.metadata.consumer_offset_manager import ConsumerOffsetManager

        offsets = ConsumerOffsetManager(stores.offsets)
        offsets.commit_offset("G", "T5", 0, 7)
        offsets.delete_topic("T5")
        assert spy.calls == ["put", "delete_range"]
        assert metadata.topics.count() == 19_999
    finally:
        metadata.close()


def test_rocksdb_offset_keys_round_trip_and_bound_a_topic():
    key = encode_offset_key(("Topic", "Group", 70000))
    assert list(decode_offsets([(key, (5).to_bytes(8, "little"))])) == [("Group", "Topic", 70000, 5)]
    start = OFFSETS.prefix + encode_offset_key(("T",))
    end = prefix_end(start)
    inside = OFFSETS.prefix + encode_offset_key(("T", "G", 3))
    outside = [OFFSETS.prefix + encode_offset_key((t, "G", 0)) for t in ("T1", "T-", "S", "U")]
    assert start <= inside < end
    assert all(not start <= k < end for k in outside)
    assert prefix_end(TOPICS.prefix) == b"t;"


def test_rocksdb_prefix_scan_returns_every_key_of_its_prefix_and_no_other(tmp_path: Path):
    """A bounded scan whose ReadOptions was a temporary lost keys: the bound must outlive the iterator."""
    import gc

    from broker.metadata.rocksdb_metadata_store import scan

    metadata = RocksDBMetadata.open(tmp_path / "metadata")
    try:
        db = metadata.db
        names = [b"G-auto", b"G1", b"G2", b"zz"]
        for n in names:
            db.put(b"g:" + n, b"v")
        for k in (b"f:x", b"g", b"g;", b"h:G1"):
            db.put(k, b"other")
        for _ in range(20):
            got = []
            for key, _value in scan(db, b"g:"):
                gc.collect(0)  # the young generation: a full pass in a test worker's heap took 50 s in all
                _ = [bytes(64) for _ in range(1000)]  # reuse freed memory
                got.append(key)
            assert got == names
    finally:
        metadata.close()


DELETE_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from broker.store.config import StoreType
    from tests.metadata.helpers import open_managers

    m = open_managers(StoreType(sys.argv[1]), Path(sys.argv[2]))
    assert m.offsets.delete_queues("Reused", [0]) == 2
    m.offsets.delete_topic("Deleted")
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close
""")


def test_forgotten_offsets_stay_forgotten_after_a_kill(store_type: StoreType, tmp_path: Path):
    """A reused static-topic queue's old offsets, and a deleted topic's, must not come back (they would be read past
    data: a topic made again starts at offset 0): a deletion is durable when the call returns, in both backends.
    (The JSON store kept a deleted topic's offsets until its next periodic persist: the restart matrix found it.)"""
    setup = open_managers(store_type, tmp_path)
    for group in ("A", "B"):
        setup.offsets.commit_offset(group, "Reused", 0, 101)
        setup.offsets.commit_offset(group, "Deleted", 3, 2)
    setup.offsets.commit_offset("A", "Reused", 1, 7)
    setup.close()
    run_killed_child(DELETE_CHILD, store_type, tmp_path)
    m = open_managers(store_type, tmp_path)
    try:
        assert [m.offsets.query_offset(g, "Reused", 0) for g in ("A", "B")] == [-1, -1]
        assert [m.offsets.query_offset(g, "Deleted", 3) for g in ("A", "B")] == [-1, -1]
        assert m.offsets.query_offset("A", "Reused", 1) == 7
    finally:
        m.stores.close()


def test_topics_of_a_group_can_be_listed_while_new_groups_and_topics_commit(tmp_path: Path):
    """A first commit of a (group, topic) adds to the table: listing it unlocked meanwhile raised "dictionary
    changed size during iteration" (GetConsumeStats failed)."""
    m = open_managers(StoreType.DEFAULT, tmp_path)
    o = m.offsets
    for i in range(5000):
        o.commit_offset("G", f"T{i}", 0, i)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows at once
    stop = threading.Event()

    def commit_new() -> None:
        n = 0
        while not stop.is_set():
            o.commit_offset(f"new{n}", "N", 0, 1)
            n += 1

    committer = threading.Thread(target=commit_new)
    committer.start()
    try:
        for _ in range(200):
            assert len(o.topics_of_group("G")) == 5000
    finally:
        stop.set()
        committer.join()
        sys.setswitchinterval(previous)
        m.stores.close()
