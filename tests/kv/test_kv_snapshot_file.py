"""A KV snapshot file cut or changed after it was written is refused whole (the review of operator commands: one
cut at a chunk boundary imported 1,000 of 1,500 entries, and one with a flipped bit a wrong value, both exit 0);
one of an earlier release (no trailer) is still read."""

from pathlib import Path

import pytest

from client.errors import MQClientError
from client.kv_snapshot_file import LENGTH, MAGIC_WITHOUT_TRAILER, read_snapshot, write_snapshot
from proto import kv_pb2


def _chunks() -> list[kv_pb2.KvSnapshotChunk]:
    header = kv_pb2.KvSnapshotHeader(shard=0, total_shards=4, broker_name="broker-a")
    entries = [kv_pb2.KvEntry(key=b"k/%04d" % i, value=b"v-%04d" % i) for i in range(30)]
    return [kv_pb2.KvSnapshotChunk(header=header, entries=entries[:20]), kv_pb2.KvSnapshotChunk(entries=entries[20:])]


def test_a_snapshot_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    assert write_snapshot(path, _chunks()) == 30
    assert read_snapshot(path) == _chunks()


def test_a_snapshot_cut_at_a_chunk_boundary_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    write_snapshot(path, _chunks())
    first = _chunks()[0].SerializeToString()
    path.write_bytes(path.read_bytes()[:len(b"RMQKVSN2") + LENGTH.size + len(first)])
    with pytest.raises(MQClientError, match=r"truncated: it ends at byte \d+ without its trailer"):
        read_snapshot(path)


def test_a_snapshot_with_a_flipped_bit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    write_snapshot(path, _chunks())
    data = bytearray(path.read_bytes())
    data[data.index(b"v-0005")] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(MQClientError, match="do not match their CRC"):
        read_snapshot(path)


def test_a_snapshot_of_an_earlier_release_is_read(tmp_path: Path) -> None:
    path = tmp_path / "old.snap"
    path.write_bytes(MAGIC_WITHOUT_TRAILER + b"".join(LENGTH.pack(len(c.SerializeToString())) + c.SerializeToString()
                                                      for c in _chunks()))
    assert read_snapshot(path) == _chunks()
