"""Message store benchmarks (issues 2 and 14), in-process, 1 KiB bodies, batches of 64.

Each figure is the median of ``Config.store_repeat`` runs and is reported beside a ceiling measured in the same
run: the bare cost of encoding such records and appending them to a file with one ``os.write`` per
batch (no offsets, no index, no dispatch), so ratios stay comparable on a noisy shared machine.
"""

import os
import shutil
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable

from bench.harness import BATCH, Config, Metric, Recorder, Target
from broker.store.config import FlushDiskType, MessageStoreConfig
from broker.store.message_store import MessageStore
from broker.store.pwrite_holding_gil import pwrite_holding_gil
from common.message_properties import encode_properties
from common.record_crc import crc32
from common.wire_batch import WireBatch, encode_wire_batch

BODY = os.urandom(1024)


def _median_rate(run: Callable[[], tuple[int, float]], repeat: int) -> float:
    return statistics.median(n / dt for n, dt in (run() for _ in range(repeat)))


def _props(n: int, unique_keys: bool) -> list[bytes]:
    if unique_keys:
        return [encode_properties({"TAGS": "TagA", "UNIQ_KEY": os.urandom(16).hex()}) for _ in range(n)]
    return [encode_properties({"TAGS": "TagA"})] * n


def raw_append_ceiling(total: int, workdir: str) -> tuple[int, float]:
    """Encode a 91-byte header + body per message and append each batch with one os.write; the CRC is the one the
    store uses (``common/record_crc.py``), so the ratio to it is the store's own work."""
    header = struct.Struct(">iIIiiqqqiq8s8siqiBH")
    path = os.path.join(workdir, "raw")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    props = _props(BATCH, False)[0]
    start = time.perf_counter()
    offset = 0
    for b in range(total // BATCH):
        parts: list[bytes] = []
        for i in range(BATCH):
            size = header.size + 1 + len(props) + len(BODY)
            crc = crc32(BODY, crc32(props))
            parts += (header.pack(size, 1, crc, 0, 0, b * BATCH + i, offset, 0, 0, 0, bytes(8), bytes(8), 0, 0,
                                  len(BODY), 1, len(props)), b"T", props, BODY)
            offset += size
        os.write(fd, b"".join(parts))
    elapsed = time.perf_counter() - start
    os.close(fd)
    os.unlink(path)
    return total, elapsed


def _store(workdir: str, flush: FlushDiskType) -> MessageStore:
    root = tempfile.mkdtemp(dir=workdir)
    store = MessageStore(MessageStoreConfig(root, mapped_file_size_commit_log=256 * 1024 * 1024,
                                            flush_disk_type=flush))
    store.start()
    return store


def _close(store: MessageStore) -> None:
    store.shutdown()
    shutil.rmtree(store.config.store_path_root_dir, ignore_errors=True)


def append_and_dispatch(total: int, workdir: str, unique_keys: bool) -> tuple[int, float]:
    store = _store(workdir, FlushDiskType.ASYNC_FLUSH)
    bodies, props = [BODY] * BATCH, _props(BATCH, unique_keys)
    start = time.perf_counter()
    r = None
    for b in range(total // BATCH):
        r = store.put_messages("BenchT", b % 8, bodies, props)
    assert r is not None and r.ok and r.append is not None
    assert store.wait_dispatched(r.append.end_offset, 120)
    elapsed = time.perf_counter() - start
    _close(store)
    return total, elapsed


def append_wire_batches(total: int, workdir: str) -> tuple[int, float]:
    """What a broker's store does for an SDK send: check the batch the producer encoded (sizes, topic, CRCs),
    write queue id, offsets, store time and host in place, append it, dispatch. The producer's encoding is done
    before the clock starts, as it happens in another process."""
    store = _store(workdir, FlushDiskType.ASYNC_FLUSH)
    records = encode_wire_batch(b"BenchW", [BODY] * BATCH, _props(BATCH, False), born_timestamp=1,
                                born_host=bytes(8))
    start = time.perf_counter()
    r = None
    for b in range(total // BATCH):
        r = store.put_wire_batch(WireBatch.parse(records, b"BenchW", b % 8, store.store_host, BATCH))
    assert r is not None and r.ok and r.append is not None
    assert store.wait_dispatched(r.append.end_offset, 120)
    elapsed = time.perf_counter() - start
    _close(store)
    return total, elapsed


def check_and_write(total: int, workdir: str) -> tuple[int, float]:
    """The floor of ``append_wire_batches``: the producer's batch checked (``WireBatch.parse``: sizes, topic, every
    CRC) and written to a segment file with one write, as the commitlog writes it; no offsets, times or batch mark
    written in, nothing dispatched. What the store adds to it is its own work."""
    records = encode_wire_batch(b"BenchW", [BODY] * BATCH, _props(BATCH, False), born_timestamp=1,
                                born_host=bytes(8))
    path = os.path.join(workdir, "check_and_write")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.ftruncate(fd, len(records) * (total // BATCH))  # a segment file: its size set when it is made
    store_host = bytes(8)
    start = time.perf_counter()
    position = 0
    for b in range(total // BATCH):
        batch = WireBatch.parse(records, b"BenchW", b % 8, store_host, BATCH)
        position += pwrite_holding_gil(fd, batch.buf, position)
    elapsed = time.perf_counter() - start
    os.close(fd)
    os.unlink(path)
    return total, elapsed


def sync_flush_concurrent(total: int, workdir: str, appenders: int = 16) -> tuple[int, float]:
    store = _store(workdir, FlushDiskType.SYNC_FLUSH)
    bodies, props = [BODY] * BATCH, _props(BATCH, False)
    per_thread = total // BATCH // appenders

    def work(q: int) -> None:
        for _ in range(per_thread):
            assert store.put_messages("BenchS", q % 8, bodies, props).ok

    threads = [threading.Thread(target=work, args=(i,)) for i in range(appenders)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    _close(store)
    return per_thread * appenders * BATCH, elapsed


def read_back(total: int, workdir: str) -> tuple[int, float]:
    store = _store(workdir, FlushDiskType.ASYNC_FLUSH)
    bodies, props = [BODY] * BATCH, _props(BATCH, False)
    r = None
    for b in range(total // BATCH):
        r = store.put_messages("BenchR", b % 8, bodies, props)
    assert r is not None and r.append is not None
    store.wait_dispatched(r.append.end_offset, 120)
    start = time.perf_counter()
    n = 0
    for q in range(8):
        offset = 0
        while True:
            got = store.get_message("BenchR", q, offset, 64)
            if not got.messages:
                break
            n += len(got.messages)
            offset = got.next_begin_offset
    elapsed = time.perf_counter() - start
    _close(store)
    return n, elapsed


METRICS = [
    Metric("store.ceiling", "raw encode+append (the store's ceiling)", "msgs/s", echo="batch", issue=2,
           short="ceiling"),
    Metric("store.append_async", "store append+dispatch, ASYNC_FLUSH", "msgs/s", echo="batch", vs="store.ceiling",
           target=Target(">=", 400_000), issue=2),
    Metric("store.append_wire", "store append+dispatch, batches as the SDK encodes them", "msgs/s", echo="batch",
           vs="store.ceiling", target=Target(">=", 0.7, of="store.ceiling"), issue=14),
    Metric("store.check_and_write", "check the SDK's batch and write it, nothing else", "msgs/s", echo="batch",
           vs="store.ceiling", issue=14, short="check+write"),
    Metric("store.append_async_keys", "store append+dispatch, unique keys indexed", "msgs/s", echo="batch",
           vs="store.ceiling", issue=2),
    Metric("store.append_sync16", "store append SYNC_FLUSH, 16 appenders", "msgs/s", echo="batch",
           vs="store.ceiling", target=Target(">=", 100_000), issue=2),
    Metric("store.read", "store read back, 64 a read", "msgs/s", echo="batch", vs="store.ceiling",
           target=Target(">=", 1_000_000), issue=2),
]


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = tempfile.mkdtemp(prefix="store-", dir=cfg.workdir)
    total, repeat = cfg.store_messages, cfg.store_repeat
    try:
        rec.record("store.ceiling", _median_rate(lambda: raw_append_ceiling(total, workdir), repeat))
        rec.record("store.append_async", _median_rate(lambda: append_and_dispatch(total, workdir, False), repeat))
        rec.record("store.append_wire", _median_rate(lambda: append_wire_batches(total, workdir), repeat))
        rec.record("store.check_and_write", _median_rate(lambda: check_and_write(total, workdir), repeat))
        rec.record("store.append_async_keys",
                   _median_rate(lambda: append_and_dispatch(total, workdir, True), repeat))
        rec.record("store.append_sync16", _median_rate(lambda: sync_flush_concurrent(total, workdir), repeat))
        rec.record("store.read", _median_rate(lambda: read_back(total, workdir), repeat))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "store", *sys.argv[1:]]))
