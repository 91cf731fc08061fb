"""A machine crash under ASYNC_FLUSH takes the commitlog's unflushed tail, while the KV state was made durable past
it (it is flushed on its own clock; RocksDB also flushes full memtables on its own). The state keeps the lost ops
(acknowledged, and they cannot be undone), and the records appended after the restart, at offsets below the old
applied offset, apply: they were skipped as applied before, each answered as applied, for good."""

import subprocess
import sys
from pathlib import Path

import pytest

from broker.kv.kv_dispatcher import KvCommitLogDispatcher
from broker.kv.kv_record import MAX_BODY_BYTES, KvOp, KvRecord, value_of
from broker.kv.kv_state_store import KvStateStore
from broker.kv.memory_kv_state_store import MemoryKvStateStore
from broker.kv.rocksdb_kv_state_store import RocksDBKvStateStore
from broker.store.message_store import MessageStore
from common.kv_shard import KV_TOPIC
from tests.store.conftest import store_config

REPO_ROOT = Path(__file__).resolve().parents[2]

# The child: the commitlog is fsynced after "a" only; "b" and "c" are applied and the KV state made durable; then
# it reports the flushed offset and waits for its SIGKILL.
CHILD = """
import sys, time
from pathlib import Path
from tests.kv.test_kv_lost_tail import open_node, put
store, kv, state = open_node(Path(sys.argv[1]), sys.argv[2])
put(store, b"a", b"1")
store.flush_service.flush_once()
flushed = store.commit_log.flushed_offset()
store.flushed_checkpoint.write(flushed)
put(store, b"b", b"2")
put(store, b"c", b"3")
state.flush(force=True)
kv.flush()
assert kv.checkpoint() == store.commit_log.max_offset() > flushed
print(flushed, store.commit_log.mapped_file_queue.files[0].path, flush=True)
time.sleep(600)
"""


def make_state(backend: str, root: Path) -> KvStateStore:
    return MemoryKvStateStore(root, 3600) if backend == "memory" else RocksDBKvStateStore(root, 3600)


def open_node(root: Path, backend: str) -> tuple[MessageStore, KvCommitLogDispatcher, KvStateStore]:
    """A store whose commitlog is flushed only when a test says so, with the KV dispatcher."""
    state = make_state(backend, root / "kv")
    store = MessageStore(store_config(root / "store", flush_interval_commit_log_ms=3_600_000,
                                      flush_interval_consume_queue_ms=3_600_000))
    kv = KvCommitLogDispatcher(state, store.commit_log.read_at)
    store.register_dispatcher(kv)
    store.start()
    return store, kv, state


def put(store: MessageStore, key: bytes, value: bytes, op: KvOp = KvOp.PUT, expected: bytes | None = None) -> int:
    props, body = KvRecord(op, key, value, expected).encode()
    result = store.put_messages(KV_TOPIC, 0, [body], [props], body_limit=MAX_BODY_BYTES)
    assert result.ok and result.append is not None, result.error
    assert store.wait_dispatched(result.append.end_offset)
    return result.append.physical_offsets[0]


@pytest.mark.parametrize("backend", ["rocksdb", "memory"])
def test_records_appended_after_a_machine_crash_took_the_tail_apply(tmp_path: Path, backend: str):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), backend], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().decode()
        assert line, child.stderr.read().decode() if child.stderr else "the child said nothing"
    finally:
        child.kill()
        child.wait(10)
    flushed_text, segment = line.split()
    flushed = int(flushed_text)
    with open(segment, "r+b") as f:  # the machine crash: the page cache held the unflushed tail
        size = f.seek(0, 2)
        f.seek(flushed)
        f.write(bytes(size - flushed))

    store, kv, state = open_node(tmp_path, backend)
    try:
        assert store.commit_log.max_offset() == flushed
        assert kv.applied_offset == flushed
        new = [put(store, b"new-%d" % i, b"v%d" % i) for i in range(3)]
        assert [value_of(v) for v in state.get(0, [b"new-0", b"new-1", b"new-2"])] == [b"v0", b"v1", b"v2"]
        cas = put(store, b"a", b"42", KvOp.CAS, expected=b"1")
        outcome = kv.take_outcome(cas)
        assert outcome is not None and outcome.applied
        assert value_of(state.get(0, [b"b"])[0]) == b"2"  # the lost tail's ops stay applied
        assert new[0] == flushed  # where the lost tail was
    finally:
        store.shutdown()
        state.close()

    store, kv, state = open_node(tmp_path, backend)  # and after a clean restart
    try:
        assert [value_of(v) for v in state.get(0, [b"a", b"new-2"])] == [b"42", b"v2"]
        assert kv.applied_offset == store.commit_log.max_offset()
    finally:
        store.shutdown()
        state.close()
