"""Tiered storage units with a real local MessageStore: the upload dispatcher (group commit, checkpoint, replay
after a restart) and the read facade's storage levels. The upload thread is not started: tests drive
``upload_due`` themselves."""

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from broker.broker_config import BrokerConfig
from broker.store.checkpoint import OffsetCheckpoint
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue.consume_queue_store import BoundaryType
from broker.store.disk_usage_watcher import USAGE_FILE_ENV
from broker.store.get_message_result import GetMessageStatus
from broker.store.message_store import MessageStore
from broker.store.message_store_reader import MessageStoreReader
from broker.tiered.dispatcher import tiered_dispatcher
from broker.tiered.fetcher.tiered_message_store import TieredMessageStore
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from broker.tiered.provider.memory_file_segment import MemoryFileSegment
from broker.tiered.provider.posix_file_segment import PosixFileSegment
from broker.tiered.replica.tier_role import TierRole
from broker.tiered.tiered_storage_level import TieredStorageLevel
from broker.tiered.tiered_store import TieredStore
from common.message_codec import decode_record
from tests.disk.rocksdb_refusal import rocksdb_disk_full

TOPIC = "TierDisp"
HOUR = 3600


class Node:
    """A local store and its tiered store on ``root``, wired as the broker wires them."""

    def __init__(self, root: Path, provider: TieredBackendServiceProvider, group_commit_count: int = 1 << 20,
                 level: TieredStorageLevel = TieredStorageLevel.NOT_IN_DISK, backend: Path | None = None,
                 role: TierRole = TierRole.MASTER):
        """``backend``: the posix tier's directory (by default under ``root``); ``role``: the tier's first."""
        self.root = root
        config = BrokerConfig(store_path_root_dir=str(root), tiered_store_enable=True,
                              tiered_store_file_path=str(backend) if backend else "",
                              tiered_backend_service_provider=provider, tiered_storage_level=level,
                              tiered_store_commit_log_max_size=16 * 1024, tiered_store_consume_queue_max_size=28 * 64,
                              tiered_store_group_commit_count=group_commit_count,
                              tiered_store_group_commit_age=3_600_000, clean_resource_interval=3_600_000)
        self.local = MessageStore(MessageStoreConfig(
            str(root), mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 256,
            destroy_mapped_file_grace_ms=0, file_reserved_time_hours=1, delete_when="*",
            clean_file_forcibly_enable=False, flush_interval_consume_queue_ms=3_600_000,
            clean_resource_interval_ms=3_600_000, max_hash_slot_num=1024, max_index_num=4096))
        self.tiered = TieredStore(config, self.local, role)  # registers the uploader before the local store starts
        self.dispatcher = self.tiered.dispatcher
        self.local.start()
        self.stopped = False
        self.sent: dict[tuple[int, int], int] = {}  # (queue id, queue offset) -> commitlog offset, of each put

    def put(self, queue_id: int, body: bytes) -> tuple[int, int]:
        """(queue offset, physical offset) once the dispatch chain has passed it."""
        r = self.local.put_messages(TOPIC, queue_id, [body], [b""])
        assert r.ok
        assert self.local.wait_dispatched(r.append.end_offset)
        self.sent[(queue_id, r.queue_offset)] = r.physical_offset
        return r.queue_offset, r.physical_offset

    def stop(self, upload: bool = True) -> None:
        """``upload=False``: as if the process died with records still waiting for upload (the local store's
        final flush still records the dispatcher's checkpoint, as its periodic flush would have)."""
        if self.stopped:
            return
        self.stopped = True
        if upload:
            self.tiered.shutdown()
        self.local.shutdown()
        self.tiered.close()


# s3 is covered by the provider units and the acceptance suite (a server round trip per write here)
@pytest.fixture(params=[TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def provider(request: pytest.FixtureRequest) -> TieredBackendServiceProvider:
    return request.param


@pytest.fixture
def nodes(tmp_path: Path):
    opened: list[Node] = []

    def start(provider: TieredBackendServiceProvider, **kwargs) -> Node:
        node = Node(tmp_path / "store", provider, **kwargs)
        opened.append(node)
        return node

    yield start
    for node in opened:
        node.stop()


def tier_matches_local(node: Node, queue_id: int) -> int:
    """Every message the tier has for the queue equals the local one, byte for byte (its commitlog offset too)."""
    flat = node.tiered.flat_files.get(TOPIC, queue_id)
    assert flat is not None
    for q in range(flat.min_offset, flat.max_offset):
        [tiered] = flat.messages(q, 1, 1 << 20, None)[0]
        [local] = node.local.get_message(TOPIC, queue_id, q, 1).messages
        assert tiered == local
        assert decode_record(tiered).queue_offset == q
    return flat.max_offset


# -- dispatcher ----------------------------------------------------------------------------------------------
def test_checkpoint_is_the_oldest_record_not_yet_uploaded(nodes, provider: TieredBackendServiceProvider):
    node = nodes(provider, group_commit_count=3)
    d = node.dispatcher
    node.put(0, b"a0")
    node.put(1, b"b0")
    end = node.local.commit_log.max_offset()
    assert d.current_checkpoint() == 0 and node.tiered.flat_files.get(TOPIC, 0) is None
    assert d.upload_due() == 0  # neither queue is due: 1 record each, young
    assert d.upload_due(force=True) == 2
    assert d.current_checkpoint() == end  # everything dispatched is in the tier
    assert d.checkpoint() == 0  # stored only by flush
    d.flush()
    assert d.checkpoint() == end == node.tiered.metadata.get_checkpoint()

    _, first_b = node.put(1, b"b1")  # queue 1 waits below queue 0's records
    for i in range(1, 4):
        node.put(0, f"a{i}".encode())
    assert d.current_checkpoint() == first_b
    assert d.upload_due() == 3  # queue 0 has 3 waiting: due; queue 1 not
    assert d.current_checkpoint() == first_b
    d.flush()
    assert node.tiered.metadata.get_checkpoint() == first_b
    assert d.upload_due(force=True) == 1
    assert d.current_checkpoint() == node.local.commit_log.max_offset()
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (4, 2)
    assert (d.uploaded_messages, d.uploaded_bytes) == (6, node.local.commit_log.max_offset())


def test_local_segments_expire_only_below_the_tier_checkpoint(nodes, provider: TieredBackendServiceProvider):
    node = nodes(provider)
    for i in range(300):
        node.put(i % 2, bytes([i % 256]) * 600)
    segments = sorted((node.root / "commitlog").iterdir())
    assert len(segments) >= 3
    for seg in segments:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    assert node.local.delete_expired_files() == 0  # aged, dispatched, but not in the tier yet
    node.dispatcher.upload_due(force=True)
    assert node.local.delete_expired_files() == 0  # in the tier, but the checkpoint is not stored yet
    node.dispatcher.flush()
    assert node.local.delete_expired_files() == len(segments) - 1  # all but the one being written
    assert node.local.min_offset(TOPIC, 0) > 0


def test_replay_after_restart_skips_what_the_tier_has(nodes, provider: TieredBackendServiceProvider):
    node = nodes(provider)
    for i in range(10):
        node.put(i % 2, f"m{i}".encode() * 30)
    assert node.dispatcher.upload_due(force=True) == 10
    tier_bytes = {q: node.tiered.flat_files.get(TOPIC, q).total_bytes() for q in (0, 1)}
    node.stop()
    meta = RocksDBTieredMetadataStore(node.root / "tiered_metadata")  # as if the checkpoint had not been stored
    meta.set_checkpoint(0)
    meta.close()

    node = nodes(provider)
    assert node.dispatcher.current_checkpoint() == 0  # everything was replayed into the uploader
    assert node.dispatcher.upload_due(force=True) == 0  # and all of it is skipped
    assert {q: node.tiered.flat_files.get(TOPIC, q).total_bytes() for q in (0, 1)} == tier_bytes
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    for i in range(10, 14):
        node.put(i % 2, f"m{i}".encode() * 30)
    assert node.dispatcher.upload_due(force=True) == 4
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (7, 7)


def test_records_replayed_below_the_stored_checkpoint_keep_their_segments_until_the_upload_pass(
        nodes, provider: TieredBackendServiceProvider):
    """After a restart the replay starts at the lowest checkpoint of all (here the consume queue's), and the uploader
    holds records below its stored checkpoint again until its pass finds the tier has them. Expiry read the stored
    checkpoint: a clean pass in between deleted their segments, the next flush stored the lower value, and the next
    recovery said the tier missed records (dispatcher_gap; a full suite under load, once)."""
    node = nodes(provider)
    for i in range(300):
        node.put(i % 2, bytes([i % 256]) * 600)
    node.dispatcher.upload_due(force=True)
    node.stop()
    OffsetCheckpoint(node.root / "consumequeue" / ".checkpoint").write(0)  # replayed from 0 at the next start

    node = nodes(provider)
    segments = sorted((node.root / "commitlog").iterdir())
    for seg in segments:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    assert node.dispatcher.current_checkpoint() == 0
    assert node.local.delete_expired_files() == 0  # before: every segment but the last, then the flush stored 0
    assert node.dispatcher.upload_due(force=True) == 0  # the tier has them all
    node.dispatcher.flush()
    assert node.local.delete_expired_files() == len(segments) - 1


def test_records_waiting_at_a_crash_are_uploaded_after_restart(nodes, provider: TieredBackendServiceProvider):
    node = nodes(provider, group_commit_count=3)
    _, first = node.put(1, b"q1-0")  # queue 1's oldest record sits below queue 0's
    for i in range(3):
        node.put(0, f"q0-{i}".encode())
    node.put(1, b"q1-1")
    assert node.dispatcher.upload_due() == 3  # queue 0 only
    node.stop(upload=False)  # died with queue 1 waiting
    meta = RocksDBTieredMetadataStore(node.root / "tiered_metadata")
    assert meta.get_checkpoint() == first  # stored by the local store's final flush of the chain
    meta.close()

    node = nodes(provider, group_commit_count=3)
    assert node.dispatcher.checkpoint() == first
    assert node.tiered.flat_files.get(TOPIC, 0).max_offset == 3
    assert node.tiered.flat_files.get(TOPIC, 1) is None
    assert node.dispatcher.upload_due(force=True) == 2  # queue 0's replayed records are skipped
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (3, 2)
    node.put(0, b"q0-3")
    node.dispatcher.upload_due(force=True)
    assert tier_matches_local(node, 0) == 4


def test_a_deleted_topic_leaves_the_tier_and_the_topic_made_again_is_uploaded(nodes,
                                                                            provider: TieredBackendServiceProvider):
    """The tier kept the deleted topic's flat files: the topic made again starts at queue offset 0, which they
    took for records they held, so none of its messages was uploaded (and reads below the local queue's start
    would have served the old ones)."""
    node = nodes(provider)
    for i in range(3):
        node.put(0, f"old-{i}".encode() * 2000)  # 3 tiered commitlog segments
    assert node.dispatcher.upload_due(force=True) == 3
    assert len(node.tiered.segments(TOPIC)) == 4
    assert node.local.delete_topic(TOPIC) is None
    assert node.put(0, b"new-0")[0] == 0
    node.put(0, b"new-1")
    assert node.dispatcher.current_checkpoint() < node.local.commit_log.max_offset()  # the deletion is owed
    assert node.dispatcher.upload_due(force=True) == 2
    assert tier_matches_local(node, 0) == 2
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    if provider is TieredBackendServiceProvider.POSIX:  # the old objects went too (a new one may reuse a path)
        objects = {str(f.relative_to(node.tiered.backend_root)) for f in Path(node.tiered.backend_root).rglob("*")
                   if f.is_file()}
        assert objects == {m.path for m in node.tiered.segments(TOPIC)} and len(objects) == 2


@pytest.mark.parametrize("level", [TieredStorageLevel.NOT_IN_DISK, TieredStorageLevel.FORCE])
def test_a_topic_made_again_reads_none_of_the_old_one_s_tier_before_the_deletion_pass(nodes, level):
    """Until the upload pass deleted the old topic's flat files (50 ms, or for as long as uploads are paused or the
    backend refuses the deletion) they served the topic made again under the name: a consumer at its end read the
    old record at that offset, and moved past the new one."""
    node = nodes(TieredBackendServiceProvider.POSIX, level=level)
    for i in range(5):
        node.put(0, f"OLD-{i}".encode())
    assert node.dispatcher.upload_due(force=True) == 5
    assert node.local.delete_topic(TOPIC) is None
    node.put(0, b"NEW-0")
    node.put(0, b"NEW-1")
    store = node.tiered.store
    read = {offset: [decode_record(m).body for m in store.get_message(TOPIC, 0, offset, 1).messages]
            for offset in range(4)}
    assert read == {0: [b"NEW-0"], 1: [b"NEW-1"], 2: [], 3: []}
    assert node.dispatcher.upload_due(force=True) == 2  # the pass deletes the old files, then uploads the new
    assert tier_matches_local(node, 0) == 2


def test_a_deletion_a_crash_cut_short_is_replayed(nodes, provider: TieredBackendServiceProvider):
    node = nodes(provider)
    for i in range(3):
        node.put(0, f"old-{i}".encode())
    assert node.dispatcher.upload_due(force=True) == 3
    node.dispatcher.flush()
    assert node.local.delete_topic(TOPIC) is None
    node.put(0, b"new-0")
    node.stop(upload=False)  # died before the pass that deletes: the stored checkpoint is below the deletion

    node = nodes(provider)
    assert node.dispatcher.upload_due(force=True) == 1
    assert tier_matches_local(node, 0) == 1
    assert [m.min_offset for m in node.tiered.metadata.iterate_queues(TOPIC)] == [0]


def test_a_deletion_the_backend_refuses_is_tried_again_before_the_topic_made_again_is_uploaded(nodes, monkeypatch):
    node = nodes(TieredBackendServiceProvider.POSIX)
    for i in range(3):
        node.put(0, f"old-{i}".encode())
    assert node.dispatcher.upload_due(force=True) == 3
    assert node.local.delete_topic(TOPIC) is None
    node.put(0, b"new-0")
    refusing = FailingWrites(monkeypatch, PosixFileSegment, OSError(5, "Input/output error"), method="destroy")
    with pytest.raises(OSError, match="Input/output error"):
        node.dispatcher.upload_due(force=True)
    # nothing of the new topic went into the old files (hidden from reads, kept for the deletion's retry)
    assert node.tiered.flat_files.files[(TOPIC, 0)].max_offset == 3
    assert node.tiered.flat_files.get(TOPIC, 0) is None
    assert node.dispatcher.current_checkpoint() < node.local.commit_log.max_offset()
    refusing.failing = False
    assert node.dispatcher.upload_due(force=True) == 1
    assert tier_matches_local(node, 0) == 1


class FailingWrites:
    """A backend's writes (or another class's ``method``: the tier's metadata store's) fail with ``error`` while
    ``failing`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, error: Exception, method: str = "write") -> None:
        self.failing = True
        self.error = error
        original = getattr(owner, method)

        def failing(*args: Any) -> Any:
            if self.failing:
                raise self.error
            return original(*args)

        monkeypatch.setattr(owner, method, failing)


def uploading_while_failing(nodes, provider: TieredBackendServiceProvider, messages: int, failed_passes: int) -> Node:
    """A node whose upload thread runs, with ``messages`` to upload, once it failed ``failed_passes`` times."""
    node = nodes(provider, group_commit_count=1)
    node.dispatcher.start()
    for i in range(messages):
        node.put(0, b"m%d" % i)
    deadline = time.monotonic() + 10
    while node.dispatcher._failed_passes < failed_passes:
        assert time.monotonic() < deadline, "the upload thread did not retry"
        time.sleep(0.01)
    return node


@pytest.mark.parametrize(("failing", "error"), [
    ("backend", OSError(5, "Input/output error")),
    ("backend", RuntimeError("a bug")),
    # An S3 tier's metadata on a full local disk: the queue's record, or where the uploaded records end.
    ("update_queue", rocksdb_disk_full("tiered_metadata/000004.log")),
    ("set_uploaded_end", rocksdb_disk_full("tiered_metadata/000004.log")),
])
def test_a_failing_backend_is_retried_logged_once_and_its_return_logged(nodes, monkeypatch, caplog, failing, error):
    """A backend's failure (an OSError, or boto3's errors) is one warning line while it lasts, and so is the tier's
    metadata store refusing a write (RocksDB's I/O error: a full disk under an S3 tier, whose uploads are not
    paused by it); anything else is a bug and keeps its traceback, once. Either way the upload thread retries with
    growing pauses, and uploads everything once the backend (or the disk) is back."""
    monkeypatch.setattr(tiered_dispatcher, "RETRY_MIN_S", 0.01)
    monkeypatch.setattr(tiered_dispatcher, "RETRY_MAX_S", 0.05)
    caplog.set_level(logging.INFO, logger=tiered_dispatcher.__name__)
    backend = (FailingWrites(monkeypatch, MemoryFileSegment, error) if failing == "backend"
               else FailingWrites(monkeypatch, RocksDBTieredMetadataStore, error, method=failing))
    node = uploading_while_failing(nodes, TieredBackendServiceProvider.MEMORY, messages=20, failed_passes=5)
    deadline = time.monotonic() + 10
    backend.failing = False
    while tiered_max(node) < 20 or node.dispatcher._failing_since is not None:  # (resumed: logged after)
        assert time.monotonic() < deadline, "nothing uploaded once the backend was back"
        time.sleep(0.01)
    assert tier_matches_local(node, 0) == 20
    queue = node.tiered.metadata.get_queue(TOPIC, 0)  # what lists the queue at a restart
    assert queue is not None and queue.max_offset == 20, queue
    assert node.tiered.metadata.get_uploaded_end() == node.local.commit_log.max_offset()  # what recovery checks
    lines = [r for r in caplog.records if "tiered_upload" in r.getMessage()]
    first, resumed = lines[0], lines[-1]
    assert len(lines) == 2 and "tiered_upload_resumed" in resumed.getMessage()
    if failing != "backend":
        assert "tiered_upload_refused pending_records=" in first.getMessage() and first.exc_info is None
        assert "the tier's metadata store refused a write" in first.getMessage()
    elif isinstance(error, OSError):
        assert "tiered_upload_refused pending_records=" in first.getMessage() and first.exc_info is None
        assert "the backend failed" in first.getMessage()
    else:
        assert "tiered_upload_failed" in first.getMessage() and first.exc_info is not None


def test_a_stop_while_the_backend_fails_skips_the_final_upload_and_the_restart_uploads_it(nodes, monkeypatch,
                                                                                          caplog):
    monkeypatch.setattr(tiered_dispatcher, "RETRY_MIN_S", 0.01)
    caplog.set_level(logging.INFO, logger=tiered_dispatcher.__name__)
    backend = FailingWrites(monkeypatch, PosixFileSegment, OSError(28, "No space left on device"))
    node = uploading_while_failing(nodes, TieredBackendServiceProvider.POSIX, messages=10, failed_passes=2)
    started = time.monotonic()
    node.stop()
    assert time.monotonic() - started < 5
    assert any("tiered_final_upload_skipped" in r.getMessage() and "reason=the backend is failing" in r.getMessage()
               for r in caplog.records)
    backend.failing = False
    again = nodes(TieredBackendServiceProvider.POSIX, group_commit_count=1)
    again.dispatcher.upload_due(force=True)
    assert tier_matches_local(again, 0) == 10


def test_a_pass_that_fails_on_one_queue_keeps_the_records_of_the_queues_after_it(nodes, monkeypatch):
    """Before, the queues due after the failing one were dropped from the pass: never uploaded until a restart,
    and the checkpoint stuck below them (so their local segments never expired)."""
    backend = FailingWrites(monkeypatch, MemoryFileSegment, OSError(5, "Input/output error"))
    node = nodes(TieredBackendServiceProvider.MEMORY, group_commit_count=1)
    first = min(node.put(q, b"m%d" % q)[1] for q in range(4))
    with pytest.raises(OSError):
        node.dispatcher.upload_due()
    assert node.dispatcher.pending_records() == 4
    assert node.dispatcher.current_checkpoint() == first
    backend.failing = False
    node.dispatcher.upload_due()
    assert node.dispatcher.pending_records() == 0
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    assert [tier_matches_local(node, q) for q in range(4)] == [1, 1, 1, 1]


BIG = 20 * 1024  # a body no tiered commitlog segment (16 KiB) holds, that a local one (64 KiB) takes


def blocked_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "tiered_queue_" in r.getMessage()]


def test_a_record_no_tiered_segment_holds_blocks_its_queue_alone(nodes, provider: TieredBackendServiceProvider,
                                                                 caplog):
    """Before, the flat file's assert failed every upload pass: no queue uploaded again, and the checkpoint (with it
    every local segment of every topic) stayed below the record for good. Now its queue stops before it, logged
    once; the other queues go on, and its later records hold neither memory nor the checkpoint: they expire
    locally like the others'."""
    caplog.set_level(logging.INFO, logger=tiered_dispatcher.__name__)
    node = nodes(provider)
    d = node.dispatcher
    node.put(0, b"a0")
    node.put(1, b"b0")
    big, _ = node.put(1, b"B" * BIG)
    node.put(1, b"b2")
    node.put(2, b"c0")
    assert d.upload_due(force=True) == 3  # a0, c0, and b0 before the record
    for i in range(300):  # a few local segments, each with records of every queue
        node.put(i % 3, bytes([i % 256]) * 600)
    d.upload_due(force=True)
    assert [tier_matches_local(node, q) for q in range(3)] == [101, big, 101]
    assert d.pending_records() == 0
    assert d.current_checkpoint() == node.local.commit_log.max_offset()
    [line] = blocked_lines(caplog)
    assert line.levelno == logging.ERROR and line.exc_info is None
    assert f"tiered_queue_blocked topic={TOPIC} queue=1 offset={big} size=" in line.getMessage()
    assert "segment_size=16384" in line.getMessage()

    segments = sorted((node.root / "commitlog").iterdir())
    assert len(segments) >= 3
    for seg in segments:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    d.flush()
    assert node.local.delete_expired_files() == len(segments) - 1  # the blocked queue holds none of them


def test_a_read_past_a_tier_that_stopped_short_goes_on_at_the_local_store_not_back_to_the_tier(
        nodes, provider: TieredBackendServiceProvider):
    """A blocked queue's tier ends at the record too large for it; once its later records expire locally, a read at
    the tier's end was sent back to the tier's start (OFFSET_TOO_SMALL, next 0): every consumer of the queue read
    the tier again and again and never reached what the local store still has (and committed 0)."""
    node = nodes(provider)
    node.put(1, b"b0")
    node.put(1, b"b1")
    big, _ = node.put(1, b"B" * BIG)
    for i in range(300):
        node.put(1, bytes([i % 256]) * 600)
    node.dispatcher.upload_due(force=True)
    segments = sorted((node.root / "commitlog").iterdir())
    for seg in segments[:-1]:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    node.dispatcher.flush()
    assert node.local.delete_expired_files() == len(segments) - 1
    store, flat = node.tiered.store, node.tiered.flat_files.get(TOPIC, 1)
    local_min = node.local.min_offset(TOPIC, 1)
    assert (flat.min_offset, flat.max_offset) == (0, big) and big < local_min < 303
    status, nxt, got, _ = reads(store, 1, 0, 32)  # the tier serves what it has
    assert (status, nxt, [q for q, _ in got]) == (GetMessageStatus.FOUND, big, [0, 1])
    for offset in (big, local_min - 1):  # in the hole: on to the local store's start
        status, nxt, got, _ = reads(store, 1, offset, 32)
        assert (status, nxt, got) == (GetMessageStatus.OFFSET_TOO_SMALL, local_min, []), offset
    status, nxt, got, _ = reads(store, 1, local_min, 2)
    assert (status, [q for q, _ in got]) == (GetMessageStatus.FOUND, [local_min, local_min + 1])
    assert store.min_offset(TOPIC, 1) == 0


def test_a_queue_blocked_before_a_restart_is_blocked_again_and_a_topic_made_again_uploads(
        nodes, provider: TieredBackendServiceProvider, caplog):
    """The record is still local after a restart: the queue's tier stops before it again (the start fills what the
    tier lacks from the local store), once; a deleted topic's queues start anew."""
    caplog.set_level(logging.INFO, logger=tiered_dispatcher.__name__)
    node = nodes(provider)
    node.put(0, b"a0")
    big, _ = node.put(0, b"B" * BIG)
    node.put(0, b"a2")
    node.put(1, b"b0")
    assert node.dispatcher.upload_due(force=True) == 2
    node.stop()
    caplog.clear()

    node = nodes(provider)
    node.put(0, b"a3")
    node.put(1, b"b1")
    assert node.dispatcher.upload_due(force=True) == 1
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (big, 2)
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    [line] = blocked_lines(caplog)
    assert f"tiered_queue_blocked topic={TOPIC} queue=0 offset={big}" in line.getMessage()

    assert node.local.delete_topic(TOPIC) is None
    for i in range(3):
        node.put(0, b"new-%d" % i)
    assert node.dispatcher.upload_due(force=True) == 3
    assert tier_matches_local(node, 0) == 3
    unblocked = blocked_lines(caplog)[-1].getMessage()
    assert unblocked == f"tiered_queue_unblocked topic={TOPIC} queue=0 reason=topic_deleted"


def test_paused_uploads_wait_are_logged_once_and_go_on_when_let(nodes, monkeypatch, caplog):
    """``paused`` (a posix tier on the store's full disk) holds uploads before each queue: a pass stops at the
    queue where it became paused, the upload thread waits, and the stop skips its final upload."""
    monkeypatch.setattr(tiered_dispatcher, "PAUSED_CHECK_S", 0.01)
    caplog.set_level(logging.INFO, logger=tiered_dispatcher.__name__)
    node = nodes(TieredBackendServiceProvider.MEMORY, group_commit_count=1)
    reason: list[str] = []
    node.dispatcher.paused = lambda: reason[0] if reason else None
    for q in range(3):
        node.put(q, b"m%d" % q)
    upload = node.dispatcher._upload

    def pausing_after_one(key, requests):
        reason.append("the disk is full")
        return upload(key, requests)

    monkeypatch.setattr(node.dispatcher, "_upload", pausing_after_one)
    assert node.dispatcher.upload_due() == 1  # the first queue, then paused
    assert node.dispatcher.pending_records() == 2
    monkeypatch.setattr(node.dispatcher, "_upload", upload)
    node.dispatcher.start()
    deadline = time.monotonic() + 10
    while not any("tiered_upload_paused" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the upload thread did not see the pause"
        time.sleep(0.01)
    assert node.dispatcher.pending_records() == 2
    reason.clear()
    end = node.local.commit_log.max_offset()
    while node.dispatcher.current_checkpoint() < end:  # uploaded, not only taken for upload
        assert time.monotonic() < deadline, "nothing uploaded once the pause ended"
        time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records if "tiered_upload" in r.getMessage()]
    assert len(lines) == 2 and "reason='the disk is full'" in lines[0] and "tiered_upload_resumed" in lines[1], lines
    assert [tier_matches_local(node, q) for q in range(3)] == [1, 1, 1]


def test_a_posix_tier_on_the_store_s_disk_pauses_above_the_warning_level_and_others_never(tmp_path, monkeypatch):
    usage = tmp_path / "usage"
    usage.write_text("95")
    monkeypatch.setenv(USAGE_FILE_ENV, str(usage))
    posix = Node(tmp_path / "posix", TieredBackendServiceProvider.POSIX)
    memory = Node(tmp_path / "memory", TieredBackendServiceProvider.MEMORY)
    try:
        assert "95.0% used, above diskSpaceWarningLevelRatio=90" in (posix.dispatcher.paused() or "")
        assert posix.local.disk_watcher.copies == 2
        assert (memory.dispatcher.paused(), memory.local.disk_watcher.copies) == (None, 1)
        usage.write_text("50")
        assert posix.dispatcher.paused() is None
    finally:
        posix.stop()
        memory.stop()


def tiered_max(node: Node) -> int:
    flat = node.tiered.flat_files.get(TOPIC, 0)
    return flat.max_offset if flat is not None else 0


# -- a tier that lost bytes; records past the uploader's memory cap ------------------------------------------
def tier_objects(node: Node, queue_id: int) -> list[str]:
    """The paths of the queue's tiered commitlog segments, oldest first."""
    flat = node.tiered.flat_files.get(TOPIC, queue_id)
    assert flat is not None
    return [m.path for m in flat.commit_log.segments]


def lose_from(node: Node, path: str, keep: int) -> None:
    """The backend keeps only the first ``keep`` bytes of ``path`` (a lost object, a short write)."""
    node.tiered.factory.open(path).write(keep, b"")


def test_records_a_tier_lost_are_uploaded_again_from_the_local_store(nodes, provider: TieredBackendServiceProvider):
    """The load cuts the units pointing at lost bytes; those records are below the checkpoint, so no replay
    brings them: the gap was logged and the queue never uploaded again (every later record dropped, the
    checkpoint moving past them, the local segments then free to expire)."""
    node = nodes(provider)
    for i in range(20):
        node.put(0, b"x%03d" % i)
    assert node.dispatcher.upload_due(force=True) == 20
    node.dispatcher.flush()
    [path] = tier_objects(node, 0)
    node.stop()
    lose_from(node, path, node.tiered.flat_files.get(TOPIC, 0).units(10, 1)[0][0])

    node = nodes(provider)
    assert node.tiered.flat_files.get(TOPIC, 0).max_offset == 10
    for i in range(20, 30):
        node.put(0, b"x%03d" % i)
    assert node.dispatcher.upload_due(force=True) == 20  # the 10 lost, then the 10 new
    assert tier_matches_local(node, 0) == 30
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    node.put(0, b"x030")
    assert node.dispatcher.upload_due(force=True) == 1
    assert tier_matches_local(node, 0) == 31


def test_a_queue_that_gets_no_new_message_has_what_its_tier_lost_uploaded_before_the_first_pass(nodes):
    node = nodes(TieredBackendServiceProvider.POSIX)
    for i in range(20):
        node.put(i % 2, b"x%03d" % i)
    node.dispatcher.upload_due(force=True)
    node.dispatcher.flush()
    [path] = tier_objects(node, 1)
    node.stop()
    lose_from(node, path, 0)

    node = nodes(TieredBackendServiceProvider.POSIX)
    assert node.tiered.flat_files.get(TOPIC, 1).max_offset == 0
    node.tiered._prepare_own()  # what the upload thread does first
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (10, 10)
    assert node.dispatcher.upload_due(force=True) == 0


def test_a_tier_that_lost_what_expired_locally_restarts_after_the_hole_and_says_so(
        nodes, caplog, provider: TieredBackendServiceProvider):
    node = nodes(provider)
    for i in range(300):
        node.put(0, b"%05d" % i * 120)
    node.dispatcher.upload_due(force=True)
    node.dispatcher.flush()
    paths = tier_objects(node, 0)
    assert len(paths) >= 8
    node.stop()
    lose_from(node, paths[4], 0)  # every unit from the first record in it on is cut at the load

    caplog.set_level(logging.WARNING)
    node = nodes(provider)
    lost_from = node.tiered.flat_files.get(TOPIC, 0).max_offset
    assert 0 < lost_from < 150
    segments = sorted((node.root / "commitlog").iterdir())
    for seg in segments[:2]:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    assert node.local.delete_expired_files() == 2  # the tier's checkpoint was past them
    local_min = node.local.min_offset(TOPIC, 0)
    assert lost_from < local_min < 300
    node.put(0, b"new")
    assert node.dispatcher.upload_due(force=True) == 301 - local_min
    flat = node.tiered.flat_files.get(TOPIC, 0)
    assert (flat.min_offset, tier_matches_local(node, 0)) == (local_min, 301)
    assert node.dispatcher.current_checkpoint() == node.local.commit_log.max_offset()
    lost = [r.getMessage() for r in caplog.records if "tiered_gap_lost" in r.getMessage()]
    assert len(lost) == 1 and f"from={lost_from} to={local_min} unserved_from=0" in lost[0], lost
    assert node.tiered.store.min_offset(TOPIC, 0) == local_min
    node.put(0, b"newer")
    assert node.dispatcher.upload_due(force=True) == 1
    node.stop()
    node = nodes(provider)  # the restart finds the queue where it was rebased
    assert (node.tiered.flat_files.get(TOPIC, 0).min_offset, tier_matches_local(node, 0)) == (local_min, 302)


def test_records_past_the_cap_are_not_kept_in_memory_but_read_again_from_the_commitlog(
        nodes, provider: TieredBackendServiceProvider):
    """Dispatch kept every record for upload while uploads could not go on (a backend down, a full disk), with no
    bound: gigabytes an hour at a high rate, then an OOM kill."""
    node = nodes(provider, group_commit_count=16)
    d = node.dispatcher
    d.policy.max_pending = 40
    kept_end = 0
    for i in range(300):
        node.put(i % 3, b"m%03d" % i * 20)
        if i < 40:
            kept_end = node.local.commit_log.max_offset()
    assert d.pending_records() <= 41
    assert d.current_checkpoint() <= kept_end  # the records not kept hold the checkpoint (and local segments)
    d.flush()
    passes = 0
    while d.current_checkpoint() < node.local.commit_log.max_offset():
        d.upload_due(force=True)
        assert d.pending_records() <= 41
        passes += 1
        assert passes < 50
    assert [tier_matches_local(node, q) for q in range(3)] == [100, 100, 100]
    node.put(0, b"after")  # kept again
    assert d.pending_records() == 1 and d.upload_due(force=True) == 1


def test_a_topic_deleted_and_made_again_while_records_are_not_kept_is_uploaded_as_the_new_topic(nodes):
    node = nodes(TieredBackendServiceProvider.MEMORY)
    d = node.dispatcher
    d.policy.max_pending = 5
    for i in range(10):
        node.put(0, b"old-%d" % i)
    assert d.pending_records() <= 6
    assert node.local.delete_topic(TOPIC) is None
    for i in range(4):
        node.put(0, b"new-%d" % i)
    while d.current_checkpoint() < node.local.commit_log.max_offset():
        d.upload_due(force=True)
    assert tier_matches_local(node, 0) == 4
    assert node.tiered.flat_files.get(TOPIC, 0).min_offset == 0


def test_records_not_kept_at_a_crash_are_uploaded_after_the_restart(nodes):
    node = nodes(TieredBackendServiceProvider.POSIX)
    node.dispatcher.policy.max_pending = 10
    for i in range(50):
        node.put(i % 2, b"m%d" % i)
    assert node.dispatcher.pending_records() <= 11
    node.dispatcher.upload_due(force=True)  # the kept ones, and as many re-read
    node.stop(upload=False)  # the checkpoint stored by the final flush is below the ones never re-read

    node = nodes(TieredBackendServiceProvider.POSIX)
    node.dispatcher.upload_due(force=True)
    assert (tier_matches_local(node, 0), tier_matches_local(node, 1)) == (25, 25)


# -- the read facade -----------------------------------------------------------------------------------------
@pytest.fixture
def expired_node(nodes, provider: TieredBackendServiceProvider) -> Node:
    """600 messages over 2 queues, all in the tier; the oldest two local commitlog segments deleted."""
    node = nodes(provider)
    for i in range(600):
        node.put(i % 2, f"{i:05d}".encode() * 120)
    node.dispatcher.upload_due(force=True)
    node.dispatcher.flush()
    segments = sorted((node.root / "commitlog").iterdir())
    assert len(segments) >= 6
    for seg in segments[:2]:
        t = time.time() - 2 * HOUR
        os.utime(seg, (t, t))
    assert node.local.delete_expired_files() == 2
    assert 0 < node.local.min_offset(TOPIC, 0) < 300
    return node


def reads(store: TieredMessageStore, queue_id: int, offset: int, n: int):
    """(status, next offset, [(queue offset, physical offset)], tier reads it took)."""
    before = store.tier_reads
    r = store.get_message(TOPIC, queue_id, offset, n)
    got = [(decode_record(m).queue_offset, decode_record(m).physical_offset) for m in r.messages]
    return r.status, r.next_begin_offset, got, store.tier_reads - before


def sent_offset(node: Node, queue_id: int, q: int) -> int:
    """The commitlog offset the put returned: what a read from either tier shows (which one served it: ``reads``)."""
    return node.sent[(queue_id, q)]


def local_position(node: Node, queue_id: int, q: int) -> int:
    return decode_record(node.local.get_message(TOPIC, queue_id, q, 1).messages[0]).physical_offset


def test_not_in_disk_reads_from_the_tier_only_what_the_local_store_lost(expired_node: Node):
    node = expired_node
    store = node.tiered.store
    assert store.level is TieredStorageLevel.NOT_IN_DISK
    local_min = node.local.min_offset(TOPIC, 0)
    assert store.min_offset(TOPIC, 0) == 0 and store.max_offset(TOPIC, 0) == 300
    status, nxt, got, tier = reads(store, 0, 0, 4)
    assert (status, nxt, tier) == (GetMessageStatus.FOUND, 4, 4)
    assert got == [(q, sent_offset(node, 0, q)) for q in range(4)]
    # from just below the local min: the tier answers up to it, the local store after it
    status, nxt, got, tier = reads(store, 0, local_min - 2, 32)
    assert (status, nxt, tier, [q for q, _ in got]) == (GetMessageStatus.FOUND, local_min, 2,
                                                        [local_min - 2, local_min - 1])
    status, nxt, got, tier = reads(store, 0, local_min, 3)
    assert (status, nxt, tier) == (GetMessageStatus.FOUND, local_min + 3, 0)
    assert got == [(q, local_position(node, 0, q)) for q in range(local_min, local_min + 3)]
    assert store.offset_by_time(TOPIC, 0, 0, BoundaryType.LOWER) == 0


def test_disable_never_reads_the_tier(expired_node: Node):
    node = expired_node
    store = TieredMessageStore(node.local, node.tiered.flat_files, TieredStorageLevel.DISABLE)
    local_min = node.local.min_offset(TOPIC, 1)
    assert store.min_offset(TOPIC, 1) == local_min
    status, nxt, got, tier = reads(store, 1, 0, 4)
    assert (status, nxt, got, tier) == (GetMessageStatus.OFFSET_TOO_SMALL, local_min, [], 0)
    status, nxt, got, tier = reads(store, 1, local_min, 2)
    assert (status, tier) == (GetMessageStatus.FOUND, 0)
    assert got == [(q, local_position(node, 1, q)) for q in range(local_min, local_min + 2)]
    assert store.offset_by_time(TOPIC, 1, 0, BoundaryType.LOWER) == node.local.offset_by_time(
        TOPIC, 1, 0, BoundaryType.LOWER)


def test_force_reads_the_tier_whenever_it_has_the_offset(expired_node: Node):
    node = expired_node
    store = TieredMessageStore(node.local, node.tiered.flat_files, TieredStorageLevel.FORCE)
    local_min = node.local.min_offset(TOPIC, 0)
    status, nxt, got, tier = reads(store, 0, local_min - 2, 10)  # not cut at the local min
    assert (status, nxt, tier) == (GetMessageStatus.FOUND, local_min + 8, 10)
    assert got == [(q, sent_offset(node, 0, q)) for q in range(local_min - 2, local_min + 8)]
    status, nxt, got, tier = reads(store, 0, 299, 5)  # the newest one too
    assert (nxt, tier, got) == (300, 1, [(299, sent_offset(node, 0, 299))])
    node.put(0, b"not uploaded yet")  # past the tier's max: the local store serves it
    status, nxt, got, tier = reads(store, 0, 300, 5)
    assert (status, nxt, tier, [q for q, _ in got]) == (GetMessageStatus.FOUND, 301, 0, [300])


def test_not_in_mem_reads_the_tier_for_old_local_segments(expired_node: Node):
    node = expired_node
    store = TieredMessageStore(node.local, node.tiered.flat_files, TieredStorageLevel.NOT_IN_MEM)
    mfq = node.local.commit_log.mapped_file_queue
    newest = mfq.last().file_from_offset
    size = node.local.commit_log.mapped_file_size
    old = [q for q in range(node.local.min_offset(TOPIC, 0), 300)
           if newest - mfq.find(local_position(node, 0, q)).file_from_offset >= 2 * size]
    hot = [q for q in range(node.local.min_offset(TOPIC, 0), 300)
           if mfq.find(local_position(node, 0, q)).file_from_offset == newest]
    assert old and hot
    _, _, got, tier = reads(store, 0, old[0], 1)
    assert (got, tier) == ([(old[0], sent_offset(node, 0, old[0]))], 1)
    _, _, got, tier = reads(store, 0, hot[0], 1)
    assert (got, tier) == ([(hot[0], local_position(node, 0, hot[0]))], 0)


@pytest.mark.parametrize("level", list(TieredStorageLevel))
def test_may_wait_on_tier_says_whether_a_read_at_or_above_the_offset_is_served_by_the_tier(expired_node: Node,
                                                                                          level: TieredStorageLevel):
    """What the broker asks before reading on its event loop: True whenever a read at that offset or above would
    go to the tier (whose backend may stall), and False where no read at or above it does."""
    node = expired_node
    node.put(0, b"not uploaded yet")
    store = TieredMessageStore(node.local, node.tiered.flat_files, level)
    served = [reads(store, 0, q, 1)[3] > 0 for q in range(301)]  # which single-message reads the tier served
    for offset in (0, 1, node.local.min_offset(TOPIC, 0) - 1, node.local.min_offset(TOPIC, 0), 150, 299, 300, 400):
        assert store.may_wait_on_tier(TOPIC, 0, offset) == any(served[offset:]), offset
    assert not node.local.may_wait_on_tier(TOPIC, 0, 0)  # the local store alone never does


def test_facade_is_a_reader_only_and_looks_up_by_id_and_key_locally(expired_node: Node):
    node = expired_node
    store = node.tiered.store
    assert isinstance(store, MessageStoreReader) and isinstance(node.local, MessageStoreReader)
    for local_only in ("put_messages", "commit_log", "reput", "consume_queue_store", "start", "shutdown"):
        assert not hasattr(store, local_only), local_only  # the local store's: reached as ``store.local``
    local_min = node.local.min_offset(TOPIC, 0)
    kept = local_position(node, 0, local_min)
    assert store.select_one_message_by_offset(kept) == node.local.select_one_message_by_offset(kept) is not None
    assert store.look_message_by_offset(kept).queue_offset == local_min
    oldest = decode_record(store.get_message(TOPIC, 0, 0, 1).messages[0])  # served by the tier
    assert oldest.queue_offset == 0 and oldest.physical_offset < node.local.commit_log.min_offset()
    assert store.select_one_message_by_offset(oldest.physical_offset) is None  # by id: the local commitlog only
    assert store.last_store_timestamp(TOPIC, 0) == node.local.last_store_timestamp(TOPIC, 0) > 0


def test_a_backend_failure_is_the_environment_s_for_the_tier_s_services_and_a_bug_is_not():
    """What the upload thread and the tier's clean service log on one line (a backend's failure) or with a
    traceback (anything else)."""
    from botocore.exceptions import EndpointConnectionError

    from broker.store.periodic_service import PeriodicService
    from broker.tiered.provider.file_segment import is_backend_error
    from broker.tiered.tiered_store import TieredCleanService
    from tests.disk.rocksdb_refusal import rocksdb_disk_full

    down = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    assert is_backend_error(down) and is_backend_error(OSError(28, "No space left on device"))
    assert not is_backend_error(ValueError("a bug"))
    assert TieredCleanService.is_environmental(down) and not TieredCleanService.is_environmental(ValueError("x"))
    rocksdb_full = rocksdb_disk_full("tiered/000009.log")
    assert TieredCleanService.is_environmental(rocksdb_full) and PeriodicService.is_environmental(rocksdb_full)
    assert not PeriodicService.is_environmental(down) and PeriodicService.is_environmental(OSError())
