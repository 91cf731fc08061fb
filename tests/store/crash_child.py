"""Crash-test child: appends to a SYNC_FLUSH store until it is killed, acknowledging every stored message.

Run as ``python -m tests.store.crash_child STORE_DIR ACK_FILE [--count N] [--checkpoint-interval-ms MS]
[--store-type default|defaultRocksDB]``.

After each ``put_messages`` that returns PUT_OK it appends one line per message to ACK_FILE::

    queue_id queue_offset sha256(body)hex

with a single ``os.write`` on an ``O_APPEND`` descriptor (the kernel keeps it across SIGKILL). A line is
written only after the put was acknowledged, so every line names a message the store promised to keep.
A SIGKILL can still cut that write short (the kernel checks for a fatal signal between pages), so a child
first drops an unterminated last line left by the one before; otherwise its first line would be glued to it.
``ready`` is printed once the store has started. With ``--count N`` the child stops appending after N
acknowledged messages, waits until they are dispatched, prints ``done`` and idles until it is killed.
``--expire`` (with ``--count``) then appends to queue 0 alone until the commitlog starts a new segment and
deletes every older segment before ``done``: the other queues have no message left in the commitlog.
With ``--store-type defaultRocksDB`` the consume queue lives in RocksDB (WAL off) and is flushed as often
as the checkpoints are written, so the interval means the same for both store types.
"""

import argparse
import hashlib
import os
import random
import signal
import sys

from broker.store.config import FlushDiskType, MessageStoreConfig, StoreType
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from common.message_properties import encode_properties

TOPIC = "CrashT"
QUEUES = 4
COMMIT_LOG_SEGMENT = 64 * 1024
CONSUME_QUEUE_SEGMENT = 20 * 500


def store_config(store_dir: str, checkpoint_interval_ms: int = 1000, store_type: StoreType = StoreType.DEFAULT,
                 flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=store_dir,
        flush_disk_type=flush_disk_type,
        mapped_file_size_commit_log=COMMIT_LOG_SEGMENT,
        mapped_file_size_consume_queue=CONSUME_QUEUE_SEGMENT,
        flush_interval_consume_queue_ms=checkpoint_interval_ms,
        clean_file_forcibly_enable=False,  # a crowded disk must not delete what the test reads back
        store_type=store_type,
    )


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def open_ack_file(path: str) -> int:
    """The ack file for appending, without a last line a SIGKILL cut short (it was never fully reported)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    if size:
        data = os.pread(fd, size, 0)
        if not data.endswith(b"\n"):
            os.ftruncate(fd, data.rfind(b"\n") + 1)
    return fd


def put_and_ack(store: MessageStore, ack_fd: int, queue_id: int, bodies: list[bytes],
                properties: list[bytes]) -> int | None:
    """One put; once acknowledged, one ack line per message. Returns the put's end offset, None if refused."""
    result = store.put_messages(TOPIC, queue_id, bodies, properties)
    if result.status is not PutMessageStatus.PUT_OK:
        print(f"put_failed status={result.status.value} error={result.error}", file=sys.stderr, flush=True)
        return None
    assert result.append is not None
    lines = "".join(f"{queue_id} {result.queue_offset + i} {hashlib.sha256(body).hexdigest()}\n"
                    for i, body in enumerate(bodies))
    write_all(ack_fd, lines.encode())
    return result.append.end_offset


def expire_all_but_queue_zero(store: MessageStore, ack_fd: int, last_end: int) -> int:
    """Queue 0 alone until the commitlog rolls to a new segment, then every older segment expires."""
    segment = last_end // COMMIT_LOG_SEGMENT
    while last_end // COMMIT_LOG_SEGMENT == segment:
        end = put_and_ack(store, ack_fd, 0, [os.urandom(1000)], [b""])
        assert end is not None
        last_end = end
    assert store.wait_dispatched(last_end, 10.0)
    store.config.file_reserved_time_hours = 0
    while store.delete_expired_files():
        pass
    return last_end


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.store.crash_child")
    parser.add_argument("store_dir")
    parser.add_argument("ack_file")
    parser.add_argument("--count", type=int, default=None, help="stop after this many acknowledged messages")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=1000,
                        help="how often dispatcher state and the flushed checkpoint are written")
    parser.add_argument("--store-type", type=StoreType, default=StoreType.DEFAULT, choices=list(StoreType))
    parser.add_argument("--expire", action="store_true", help="after --count, expire all but queue 0's last messages")
    parser.add_argument("--flush-disk-type", type=FlushDiskType, default=FlushDiskType.SYNC_FLUSH,
                        choices=list(FlushDiskType), help="ASYNC_FLUSH: acknowledged before the fsync")
    args = parser.parse_args()

    rng = random.Random(os.getpid())
    store = MessageStore(store_config(args.store_dir, args.checkpoint_interval_ms, args.store_type,
                                      args.flush_disk_type))
    if args.store_type is StoreType.DEFAULT_ROCKSDB:  # a RocksDB flush (and checkpoint) on every flush service run
        store.consume_queue_store.flush_interval_s = args.checkpoint_interval_ms / 1000
    ack_fd = open_ack_file(args.ack_file)
    store.start()
    print("ready", flush=True)

    acked = 0
    last_end = 0
    pid = os.getpid()
    while args.count is None or acked < args.count:
        queue_id = rng.randrange(QUEUES)
        bodies = [rng.randbytes(rng.randint(10, 3000)) for _ in range(rng.randint(1, 8))]
        properties = []
        for i in range(len(bodies)):
            if rng.random() < 0.5:
                props = {"KEYS": f"k{pid}-{acked + i}", "TAGS": rng.choice(("TagA", "TagB", "TagC"))}
                properties.append(encode_properties(props))
            else:
                properties.append(b"")
        end = put_and_ack(store, ack_fd, queue_id, bodies, properties)
        if end is None:
            if args.count is not None:
                return 3
            continue
        last_end = end
        acked += len(bodies)

    if args.expire:
        last_end = expire_all_but_queue_zero(store, ack_fd, last_end)
    if not store.wait_dispatched(last_end, 10.0):
        print(f"dispatch_timeout end={last_end}", file=sys.stderr, flush=True)
        return 4
    print("done", flush=True)
    while True:  # idle until killed: the store is never shut down cleanly
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
