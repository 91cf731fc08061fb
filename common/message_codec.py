"""The commitlog record: one layout shared by the store (append, recovery, dispatch) and the SDK (decode).

Layout, big-endian; fixed header then the variable part::

     0 total_size i32        4 magic u32            8 body_crc u32
    12 queue_id i32         16 flag i32            20 queue_offset i64
    28 physical_offset i64  36 store_timestamp i64 44 sys_flag i32
    48 born_timestamp i64   56 born_host 8s        64 store_host 8s
    72 reconsume_times i32  76 prepared_tx_offset i64
    84 body_len i32         88 topic_len u8        89 properties_len u16
    91 topic | properties | body

``body_crc`` is the CRC32 of the whole variable part (topic, properties, body). The body is last, so a
tail cut anywhere in a record always breaks either the structure or the CRC.

The most significant byte of ``sys_flag`` is the commitlog's own: on every append it writes ``BATCH_CONTINUES``
there into each record of the append but the last, so recovery can cut an append that a crash left part-written
(its whole records would pass every other check). Decoders hide it.
"""

import mmap
import struct
from collections.abc import Sequence

from common.message import MessageExt
from common.record_crc import crc32

MESSAGE_MAGIC = 0x524D5131  # "RMQ1"
BLANK_MAGIC = 0x424C4E4B  # "BLNK", end-of-segment marker; no torn prefix of MESSAGE_MAGIC reads as it
BLANK_MIN_LENGTH = 8  # total_size + magic

HEADER = struct.Struct(">iIIiiqqqiq8s8siqiBH")
HEADER_SIZE = HEADER.size  # 91
assert HEADER_SIZE == 91

OFFSET_STORE_TIMESTAMP = 36
OFFSET_BATCH_MARK = 44  # sys_flag's most significant byte
BATCH_CONTINUES = 0x01  # in that byte: more records of the same append follow this one
SYS_FLAG_SENDER_BITS = 0x00FFFFFF  # what of sys_flag a record's sender sets (and a decoder shows)
# The fields dispatch needs: size, magic, queue id, queue offset, physical offset, store time, topic and
# properties lengths (unpacking only these is about twice as fast as the whole header).
DISPATCH_FIELDS = struct.Struct(">iI4xi4xqqq44xBH")
SIZE_MAGIC = struct.Struct(">iI")
STORE_TIMESTAMP = struct.Struct(">q")
BLANK = struct.Struct(">iI")

MAX_TOPIC_BYTES = 255


class CorruptRecordError(ValueError):
    """A record failed its structure or CRC check."""


def record_size(topic_len: int, properties_len: int, body_len: int) -> int:
    return HEADER_SIZE + topic_len + properties_len + body_len


def record_parts(topic: bytes, queue_id: int, bodies: Sequence[bytes], properties: Sequence[bytes], *,
                 born_timestamp: int, born_host: bytes, store_host: bytes = bytes(8), flag: int = 0,
                 sys_flag: int = 0, reconsume_times: int = 0, queue_offset: int = 0, physical_offset: int = 0,
                 store_timestamp: int = 0) -> list[bytes]:
    """The pieces of records back to back (header, topic, properties, body each), every record with the given
    queue offset, physical offset and store time: the commitlog writes its own into them as it appends
    (``common/wire_batch.py``). The one encoder of records: the SDK's batches, the store's own writes, tools."""
    pack = HEADER.pack
    topic_crc, fixed, topic_len = crc32(topic), HEADER_SIZE + len(topic), len(topic)
    parts: list[bytes] = []
    add = parts.extend
    for body, props in zip(bodies, properties, strict=True):
        add((pack(fixed + len(props) + len(body), MESSAGE_MAGIC, crc32(body, crc32(props, topic_crc)), queue_id,
                  flag, queue_offset, physical_offset, store_timestamp, sys_flag, born_timestamp, born_host,
                  store_host, reconsume_times, 0, len(body), topic_len, len(props)),
             topic, props, body))
    return parts


def encode_record(topic: bytes, queue_id: int, body: bytes, properties: bytes, *, queue_offset: int = 0,
                  physical_offset: int = 0, store_timestamp: int = 0, born_timestamp: int = 0,
                  born_host: bytes = bytes(8), store_host: bytes = bytes(8), flag: int = 0, sys_flag: int = 0,
                  reconsume_times: int = 0) -> bytes:
    """One whole record (tests, tools)."""
    return b"".join(record_parts(topic, queue_id, [body], [properties], born_timestamp=born_timestamp,
                                 born_host=born_host, store_host=store_host, flag=flag, sys_flag=sys_flag,
                                 reconsume_times=reconsume_times, queue_offset=queue_offset,
                                 physical_offset=physical_offset, store_timestamp=store_timestamp))


def write_blank(buf: memoryview | bytearray, pos: int, remaining: int) -> None:
    BLANK.pack_into(buf, pos, remaining, BLANK_MAGIC)


def check_record(buf: memoryview | bytes | mmap.mmap, pos: int, limit: int, expected_offset: int,
                 verify_crc: bool) -> int:
    """Size of the valid record at ``pos``; 0 for an end-of-segment marker; -1 if it is not a whole,
    intact record (torn, corrupt, or unwritten zeros). ``expected_offset`` is its commitlog offset."""
    if pos + BLANK_MIN_LENGTH > limit:
        return -1
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return 0 if size >= BLANK_MIN_LENGTH and pos + size == limit else -1
    if magic != MESSAGE_MAGIC or size < HEADER_SIZE or pos + size > limit:
        return -1
    h = HEADER.unpack_from(buf, pos)
    if h[6] != expected_offset or h[5] < 0 or h[3] < 0 or h[15] == 0:
        return -1
    if record_size(h[15], h[16], h[14]) != size:
        return -1
    if verify_crc and crc32(buf[pos + HEADER_SIZE : pos + size]) != h[2]:
        return -1
    return size


def decode_record(buf: memoryview | bytes, pos: int = 0, verify_crc: bool = True) -> MessageExt:
    """Decode one record (the SDK's path). Raises :class:`CorruptRecordError` on a bad record."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"record at {pos} is cut: {len(buf) - pos} bytes < header {HEADER_SIZE}")
    (size, magic, crc, queue_id, flag, queue_offset, physical_offset, store_ts, sys_flag, born_ts,
     born_host, store_host, reconsume, prepared, body_len, topic_len, props_len) = HEADER.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptRecordError(f"record at {pos} has bad magic {magic:#x}")
    if size != record_size(topic_len, props_len, body_len) or pos + size > len(buf):
        raise CorruptRecordError(f"record at {pos} is torn: size {size}, {len(buf) - pos} bytes present")
    var = bytes(buf[pos + HEADER_SIZE : pos + size])
    if verify_crc and crc32(var) != crc:
        raise CorruptRecordError(f"record at {pos} (commitlog offset {physical_offset}) fails its CRC")
    props_end = topic_len + props_len
    return MessageExt(var[:topic_len].decode(), var[props_end:], queue_id, queue_offset, physical_offset, store_ts,
                      born_ts, var[topic_len:props_end], born_host, store_host, flag, sys_flag & SYS_FLAG_SENDER_BITS,
                      reconsume, prepared, crc)


def decode_records(buf: memoryview | bytes) -> list[MessageExt]:
    """Decode back-to-back records, as a pull returns them."""
    out = []
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        out.append(decode_record(view, pos))
        pos += SIZE_MAGIC.unpack_from(view, pos)[0]
    return out
