"""Tiered storage under crashes (issue 7): SIGKILL of a broker while it uploads, restarted on the same store, and
(offline, with the product classes) a crash between the tiered commitlog commit and the consume queue commit."""

import random
import re
import struct
import threading
import time
from pathlib import Path

import pytest

from broker.tiered.file.flat_message_file import FlatMessageFile
from broker.tiered.metadata.rocksdb_tiered_metadata_store import RocksDBTieredMetadataStore
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, TieredBackendServiceProvider
from client import Admin, Message, Producer, PullConsumer
from client.errors import MQClientError
from client.results import PullStatus
from common.message_codec import check_record, decode_record, encode_record
from tests.cluster import Cluster, make_cluster, wait_until

BROKER = "broker-a"
CQ_UNIT = struct.Struct(">qiqq")  # tiered consume queue unit: commitlog position, size, tags hash, store time
ABNORMAL = "store_recovered mode=abnormal"


# -- 3. SIGKILL during uploads ------------------------------------------------------------------------------
class Sender:
    """Sends batches continuously from a few threads through kills and restarts; records what was acknowledged:
    ``acked[queue_id][queue_offset] = (body, key, tag)``. Failed sends are not retried (their bodies may or may
    not be stored); every body ever attempted is in ``attempted``."""

    def __init__(self, addr: str, topic: str, threads: int = 2, batch: int = 32) -> None:
        self.topic, self.batch = topic, batch
        self.producer = Producer(addr, send_timeout_ms=2000, retry_times=1)
        self.acked: dict[int, dict[int, tuple[bytes, str, str]]] = {}
        self.attempted: set[bytes] = set()
        self.failures = 0
        self.errors: list[BaseException] = []
        self._seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, name=f"sender-{i}", daemon=True) for i in range(threads)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self.producer.close()

    def acked_count(self) -> int:
        with self._lock:
            return sum(map(len, self.acked.values()))

    def _next_batch(self) -> list[Message]:
        with self._lock:
            first, self._seq = self._seq, self._seq + self.batch
        msgs = [Message(self.topic, b"crash-%08d-" % i + b"%x" % (i * 40503) * 12, tags=f"t{i % 3}",
                        keys=[f"c{i}"]) for i in range(first, first + self.batch)]
        with self._lock:
            self.attempted.update(m.body for m in msgs)
        return msgs

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msgs = self._next_batch()
                try:
                    result = self.producer.send_batch(msgs)
                except MQClientError:
                    with self._lock:
                        self.failures += 1
                    time.sleep(0.05)  # the broker is down or restarting
                    continue
                with self._lock:
                    queue = self.acked.setdefault(result.queue.queue_id, {})
                    for i, m in enumerate(msgs):
                        offset = result.queue_offset + i
                        assert offset not in queue, f"queue {result.queue.queue_id} offset {offset} acked twice"
                        queue[offset] = (m.body, m.key_list()[0], m.tags or "")
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)


def tiered_status(cluster: Cluster, topic: str) -> dict[int, object]:
    with Admin(cluster.addr) as admin:
        (status,) = admin.tiered_status(topic)
    return {q.queue_id: q for q in status.queues}


def broker_log_lines(cluster: Cluster, with_truncations: bool = False) -> str:
    """The broker log's ERROR lines and exception messages (over every restart); with ``with_truncations``
    also the tier truncations at recovery, which explain a later gap."""
    lines = cluster.brokers[BROKER].log().splitlines()
    return "\n".join([line for line in lines if " ERROR " in line or re.match(r"\w+(Error|Exception): ", line)
                       or (with_truncations and "tiered_truncated" in line)][:20])


def tier_lines(cluster: Cluster, topic: str, queue_id: int) -> str:
    """The broker's log lines about the tier's side of one queue (loads, reconciled sizes, cuts, expiry), across
    its restarts."""
    marks = (f"topic={topic} queue={queue_id} ", f"/{topic}/{queue_id}/")
    lines = cluster.brokers[BROKER].log().splitlines()
    return "\n".join(line for line in lines if "tiered_" in line and any(m in line for m in marks))[-4000:]


def read_tier_files(root: Path, topic: str, queue_id: int) -> list[tuple[tuple[int, int, int, int], bytes]]:
    """The queue's units straight from the tier's consume queue objects, each with the commitlog record it
    points at (read from the commitlog objects)."""
    base = root / BROKER / topic / str(queue_id)
    cq = b""
    for f in sorted((base / "consumequeue").iterdir()):
        assert int(f.name) == len(cq), f"consume queue object {f} does not continue the stream at {len(cq)}"
        cq += f.read_bytes()
    assert len(cq) % CQ_UNIT.size == 0, f"{base}: torn consume queue unit"
    logs = {int(f.name): f.read_bytes() for f in (base / "commitlog").iterdir()}
    bases = sorted(logs)
    out = []
    for unit in CQ_UNIT.iter_unpack(cq):
        position, size = unit[0], unit[1]
        owner = max((b for b in bases if b <= position), default=None)
        assert owner is not None, f"{base}: unit points at {position}, before every commitlog object"
        data = logs[owner]
        assert position - owner + size <= len(data), f"{base}: unit {unit} points past its commitlog object"
        out.append((unit, data[position - owner : position - owner + size]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("store_type", ["default", "defaultRocksDB"])
def test_sigkill_during_uploads_loses_nothing_acknowledged(tmp_path: Path, store_type: str) -> None:
    topic, queues, cycles = "TieredCrash", 4, 6
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    tier_root = tmp_path / "tier-objects"
    cluster = make_cluster(
        tmp_path, (BROKER,), tieredStoreEnable="true", tieredBackendServiceProvider="posix",
        tieredStoreFilePath=tier_root, tieredStorageLevel="FORCE", tieredStoreGroupCommitAge=50,
        tieredStoreGroupCommitCount=64, tieredStoreCommitLogMaxSize=256 * 1024,
        tieredStoreConsumeQueueMaxSize=28 * 512, mappedFileSizeCommitLog=256 * 1024, fileReservedTime="0.0003",
        deleteWhen="*", cleanResourceInterval=200, flushIntervalConsumeQueue=100, registerNameServerPeriod=1000,
        storeType=store_type)
    sender = Sender(cluster.addr, topic)
    try:
        cluster.create_topic(topic, queues=queues)
        sender.start()
        for cycle in range(cycles):
            before = sender.acked_count()
            wait_until(lambda b=before: sender.acked_count() > b + 500, timeout=30,
                       what=f"sends before kill {cycle} (seed {seed})")
            time.sleep(rng.uniform(0.0, 0.8))
            cluster.brokers[BROKER].kill()
            time.sleep(rng.uniform(0.0, 0.3))
            daemon = cluster.start_broker(BROKER)
            assert daemon.log().count(ABNORMAL) == cycle + 1, \
                f"restart {cycle} did not recover abnormally: the kill did not land (seed {seed})"
        time.sleep(0.5)  # sends go on after the last restart
        sender.stop()
        assert not sender.errors, sender.errors
        assert sender.failures > 0, "no send ever failed: the broker was never down"
        acked = sender.acked
        assert set(acked) == set(range(queues))

        def uploaded() -> dict[int, object] | None:
            assert not broker_log_lines(cluster), \
                f"the broker failed (seed {seed}):\n{broker_log_lines(cluster, with_truncations=True)}"
            status = tiered_status(cluster, topic)
            return status if all(q.upload_lag == 0 and q.tiered_max_offset == q.local_max_offset
                                 for q in status.values()) and len(status) == queues else None

        status = wait_until(uploaded, timeout=60, interval=0.2, what=f"upload lag 0 (seed {seed})")
        for q, want in acked.items():
            assert status[q].tiered_min_offset == 0, f"queue {q} (seed {seed}):\n{tier_lines(cluster, topic, q)}"
            assert max(want) < status[q].tiered_max_offset, f"queue {q}: acked offsets beyond the tier"

        # through the broker: FORCE serves every offset the tier has from the tier (the SDK checks CRCs)
        with PullConsumer(cluster.addr, group="crash-reader") as consumer:
            for mq in consumer.queues(topic):
                want = acked[mq.queue_id]
                end = status[mq.queue_id].tiered_max_offset
                assert consumer.min_offset(mq) == 0
                offset = 0
                while offset < end:
                    result = consumer.pull(mq, offset=offset, max_nums=512)
                    assert result.status is PullStatus.FOUND, (mq, offset, result.status)
                    for m in result.messages:
                        assert m.queue_offset == offset, (mq, m.queue_offset, offset)
                        assert m.body in sender.attempted, (mq, offset, m.body[:40])
                        if offset in want:
                            assert (m.body, m.keys, m.tags) == (want[offset][0], [want[offset][1]], want[offset][2]), \
                                (mq, offset, seed)
                        offset += 1
                assert offset == end
        assert not broker_log_lines(cluster), broker_log_lines(cluster, with_truncations=True)  # e.g. tiered_gap
        assert cluster.brokers[BROKER].log().count(ABNORMAL) == cycles
    finally:
        sender.stop()
        cluster.stop()

    # the tier's own objects: every consume queue unit resolves to a whole, CRC-valid record of its offset
    for q, want in acked.items():
        units = read_tier_files(tier_root, topic, q)
        assert len(units) == status[q].tiered_max_offset
        for offset, ((_, size, _, store_time), raw) in enumerate(units):
            m = decode_record(raw, verify_crc=True)  # its commitlog offset is the local one, not its tiered position
            assert check_record(raw, 0, len(raw), m.physical_offset, verify_crc=True) == size, (q, offset, seed)
            assert (m.topic, m.queue_id, m.queue_offset, m.store_timestamp) == (topic, q, offset, store_time)
            assert m.body in sender.attempted
            if offset in want:
                assert m.body == want[offset][0], (q, offset, seed)


# -- 4. crash between the tiered commitlog and consume queue commits -----------------------------------------
def tier_record(topic: str, queue_id: int, queue_offset: int, body: bytes, store_time: int) -> bytearray:
    return bytearray(encode_record(topic.encode(), queue_id, body, b"", queue_offset=queue_offset,
                                   physical_offset=local_offset(queue_offset), store_timestamp=store_time))


def local_offset(queue_offset: int) -> int:
    """The commitlog offset ``tier_record`` gives a record (kept in the tier)."""
    return 10**9 + queue_offset


def open_flat(root: Path, topic: str, queue_id: int) -> tuple[RocksDBTieredMetadataStore, FlatMessageFile]:
    metadata = RocksDBTieredMetadataStore(root / "metadata")
    factory = FileSegmentFactory(TieredBackendServiceProvider.POSIX, root / "tier")
    flat = FlatMessageFile(factory, metadata, BROKER, topic, queue_id,
                           commit_log_segment_size=4096, consume_queue_segment_size=28 * 16)
    queue = metadata.get_queue(topic, queue_id)
    flat.load(queue.min_offset if queue is not None else 0)
    return metadata, flat


def check_units_resolve(flat: FlatMessageFile, bodies: dict[int, bytes], topic: str, queue_id: int) -> None:
    """Every committed unit points at a whole, CRC-valid record in the tiered commitlog holding that offset."""
    units = flat.units(flat.min_offset, flat.max_offset - flat.min_offset)
    assert len(units) == flat.max_offset - flat.min_offset
    for q, (position, size, _, store_time) in enumerate(units, start=flat.min_offset):
        assert position + size <= flat.commit_log.commit_offset
        raw = flat.commit_log.read(position, size)
        assert check_record(raw, 0, len(raw), local_offset(q), verify_crc=True) == size, q
        m = decode_record(raw, verify_crc=True)
        assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.store_timestamp, m.body) == \
            (topic, queue_id, q, local_offset(q), store_time, bodies[q])
    records, _, next_offset = flat.messages(flat.min_offset, 10**6, 1 << 30, None)
    assert next_offset == flat.max_offset
    assert [decode_record(r).body for r in records] == [bodies[q] for q in range(flat.min_offset, flat.max_offset)]


def test_crash_between_commitlog_and_consume_queue_commit(tmp_path: Path) -> None:
    topic, queue_id = "TieredHalf", 3
    metadata, flat = open_flat(tmp_path, topic, queue_id)
    bodies: dict[int, bytes] = {}

    def append(first: int, count: int, tag: bytes) -> None:
        for q in range(first, first + count):
            bodies[q] = b"%s-%05d-" % (tag, q) + b"z" * (q % 97)
            flat.append(tier_record(topic, queue_id, q, bodies[q], 1_700_000_000_000 + q), q, q % 5,
                        1_700_000_000_000 + q)

    append(0, 40, b"first")  # whole commits: a few segments of each file
    flat.commit()
    append(40, 10, b"second")
    flat.commit()
    assert flat.max_offset == 50
    committed_log_end = flat.commit_log.commit_offset

    append(50, 30, b"lost")  # crosses a commitlog segment boundary (4 KiB segments)
    flat.commit_log.commit()  # the commitlog reached the tier; the crash comes before the consume queue's commit
    half_log_end = flat.commit_log.commit_offset
    assert half_log_end > committed_log_end
    metadata.close()
    del flat, metadata

    metadata, flat = open_flat(tmp_path, topic, queue_id)
    try:
        assert (flat.min_offset, flat.max_offset, flat.dispatch_offset) == (0, 50, 50)
        # the bytes of offsets 50..79 stay in the commitlog, unreferenced
        assert flat.commit_log.commit_offset == half_log_end > committed_log_end
        last_position, last_size, _, _ = flat.units(49, 1)[0]
        assert last_position + last_size == committed_log_end
        check_units_resolve(flat, bodies, topic, queue_id)
        assert flat.units(50, 10) == []
        assert flat.messages(50, 10, 1 << 20, None) == ([], 0, 50)

        append(50, 30, b"again")  # the replay uploads the same queue offsets once more
        flat.commit()
        assert flat.max_offset == 80
        assert flat.units(50, 1)[0][0] == half_log_end  # after the unreferenced bytes
        check_units_resolve(flat, bodies, topic, queue_id)
    finally:
        metadata.close()

    metadata, flat = open_flat(tmp_path, topic, queue_id)
    try:
        assert (flat.min_offset, flat.max_offset) == (0, 80)
        check_units_resolve(flat, bodies, topic, queue_id)
        assert all(decode_record(r).body.startswith(b"again-") for r in flat.messages(50, 30, 1 << 20, None)[0])
    finally:
        metadata.close()
