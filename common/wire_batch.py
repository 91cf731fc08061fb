"""A batch that travels as the commitlog stores it: the SDK encodes the records (``encode_wire_batch``), the
broker checks them (``WireBatch.parse``) and writes what only it knows (queue id, queue offset, physical offset,
store time, store host) at their fixed positions before appending the bytes as they came.

The CRC covers only the variable part (topic, properties, body), so writing the header fields in place keeps
it valid: a record's bytes are encoded once, by the producer, and are the bytes a consumer receives.
"""

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import add

from common.message_codec import (
    BATCH_CONTINUES,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    OFFSET_BATCH_MARK,
    CorruptRecordError,
    record_parts,
)
from common.record_crc import crc32

OFFSET_QUEUE_ID = 12
OFFSET_QUEUE_OFFSET = 20  # queue offset, physical offset, store time (three i64 side by side), then the batch mark
OFFSET_STORE_HOST = 64
SIZE = QUEUE_ID = struct.Struct(">i")
ASSIGNED = struct.Struct(">qqqB")
assert OFFSET_QUEUE_OFFSET + ASSIGNED.size - 1 == OFFSET_BATCH_MARK
HOST = struct.Struct(">8s")
# What the broker checks of each record: size, magic, crc, then body/topic/properties lengths.
CHECKED_FIELDS = struct.Struct(">iII72xiBH")
assert CHECKED_FIELDS.size == HEADER_SIZE


def encode_wire_batch(topic: bytes, bodies: Sequence[bytes], properties: Sequence[bytes], *, born_timestamp: int,
                      born_host: bytes, flag: int = 0, sys_flag: int = 0) -> bytes:
    """The SDK's side: records with zeros where the broker writes queue id, offsets, store time and host."""
    return b"".join(record_parts(topic, 0, bodies, properties, born_timestamp=born_timestamp, born_host=born_host,
                                 flag=flag, sys_flag=sys_flag))


@dataclass(slots=True)
class WireBatch:
    """Records of one topic ready to append to one queue (``CommitLog.append_batch``): a producer's, checked by
    :meth:`parse`, or the store's own writes, encoded by :meth:`of`."""

    topic: bytes
    queue_id: int
    sizes: list[int]
    body_bytes: int  # the bodies' total: a send's batch is limited by maxMessageSize as a whole
    max_body: int
    max_properties: int
    buf: bytearray
    # Each record's property block. Equal blocks side by side are mostly one object (always when every record has
    # the same block), so whoever looks into them (delay, transactions, dispatch) can skip a repeat by identity;
    # a repeat that is another object is only looked at again.
    properties: list[bytes]

    @classmethod
    def parse(cls, records: bytes, topic: bytes, queue_id: int, store_host: bytes, max_count: int) -> "WireBatch":
        """Check every record (whole, its magic, sizes that add up, the topic, a body, its CRC) while writing the
        queue id and store host into a copy. Raises :class:`CorruptRecordError` saying what is wrong and where."""
        return (_parse_equal_sized(records, topic, queue_id, store_host, max_count)
                or _parse_each(records, topic, queue_id, store_host, max_count))

    @classmethod
    def of(cls, topic: bytes, queue_id: int, bodies: Sequence[bytes], properties: Sequence[bytes], *,
           born_timestamp: int, born_host: bytes, store_host: bytes, flag: int = 0, sys_flag: int = 0) -> "WireBatch":
        """Records the store encodes itself (unary sends with bodies, KV, system topics)."""
        buf = bytearray().join(record_parts(topic, queue_id, bodies, properties, born_timestamp=born_timestamp,
                                            born_host=born_host, store_host=store_host, flag=flag,
                                            sys_flag=sys_flag))
        fixed = HEADER_SIZE + len(topic)
        body_sizes = list(map(len, bodies))
        sizes = [fixed + len(props) + n for props, n in zip(properties, body_sizes, strict=True)]
        return cls(topic, queue_id, sizes, sum(body_sizes), max(body_sizes), max(map(len, properties)), buf,
                   _runs_shared(properties))

    @classmethod
    def of_records(cls, topic: bytes, queue_id: int, records: Sequence[bytes]) -> "WireBatch":
        """Whole records of ``topic`` and ``queue_id`` encoded elsewhere (``record_parts``), each with its own born
        time, host and flag, and the store host written in: the timer topic's writes and its deliveries."""
        unpack = CHECKED_FIELDS.unpack_from
        fields = [unpack(r) for r in records]
        bodies = [f[3] for f in fields]
        properties = [r[HEADER_SIZE + f[4] : HEADER_SIZE + f[4] + f[5]] for r, f in zip(records, fields, strict=True)]
        return cls(topic, queue_id, [f[0] for f in fields], sum(bodies), max(bodies), max(f[5] for f in fields),
                   bytearray().join(records), _runs_shared(properties))

    def encode(self, i: int, j: int, queue_offset: int, physical_offset: int, store_timestamp: int,
               physical_offsets: list[int]) -> memoryview:
        """Records i..j-1 with their offsets, store time and batch mark written in (every record but the batch's
        last says more follow); appends each record's offset."""
        sizes, buf = self.sizes, self.buf
        pack = ASSIGNED.pack_into
        start = sum(sizes[:i]) if i else 0
        offsets = list(accumulate(sizes[i:j - 1], initial=physical_offset))
        delta = start + OFFSET_QUEUE_OFFSET - physical_offset  # a record's position in ``buf``, from its offset
        for offset_in_queue, physical in enumerate(offsets, queue_offset):
            pack(buf, physical + delta, offset_in_queue, physical, store_timestamp, BATCH_CONTINUES)
        if j == len(sizes):
            buf[offsets[-1] + delta + OFFSET_BATCH_MARK - OFFSET_QUEUE_OFFSET] = 0
        physical_offsets += offsets
        return memoryview(buf)[start:start + offsets[-1] - physical_offset + sizes[j - 1]]

    def total_size(self) -> int:
        return len(self.buf)


def _parse_each(records: bytes, topic: bytes, queue_id: int, store_host: bytes, max_count: int) -> WireBatch:
    """:meth:`WireBatch.parse` a record at a time: any batch, and the one that says what is wrong."""
    view = memoryview(records)
    end = len(records)
    unpack = CHECKED_FIELDS.unpack_from
    starts_with = records.startswith
    buf = bytearray(records)
    put_id, put_host = QUEUE_ID.pack_into, HOST.pack_into
    topic_len = len(topic)
    fixed = HEADER_SIZE + topic_len
    sizes: list[int] = []
    properties: list[bytes] = []
    props = b""
    body_bytes = max_body = max_props = pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"record {len(sizes)} is cut: {end - pos} bytes < header {HEADER_SIZE}")
        size, magic, crc, body_len, t_len, p_len = unpack(records, pos)
        # One test for a good record (the common case); what is wrong is worked out only for a bad one.
        if not (magic == MESSAGE_MAGIC and t_len == topic_len and size == fixed + p_len + body_len and body_len > 0
                and pos + size <= end and starts_with(topic, pos + HEADER_SIZE)
                and crc32(view[pos + HEADER_SIZE : pos + size]) == crc):
            raise CorruptRecordError(_what_is_wrong(records, pos, len(sizes), topic))
        put_id(buf, pos + OFFSET_QUEUE_ID, queue_id)
        put_host(buf, pos + OFFSET_STORE_HOST, store_host)
        sizes.append(size)
        if p_len != len(props) or not records.startswith(props, pos + fixed):  # not the last record's block
            props = records[pos + fixed : pos + fixed + p_len]
        properties.append(props)
        body_bytes += body_len
        if body_len > max_body:
            max_body = body_len
        if p_len > max_props:
            max_props = p_len
        pos += size
        if len(sizes) > max_count:
            raise CorruptRecordError(f"batch holds more than {max_count} records")
    if not sizes:
        raise CorruptRecordError("batch is empty: no records")
    return WireBatch(topic, queue_id, sizes, body_bytes, max_body, max_props, buf, properties)


def _parse_equal_sized(records: bytes, topic: bytes, queue_id: int, store_host: bytes,
                       max_count: int) -> WireBatch | None:
    """:meth:`WireBatch.parse` for the common batch, records all of one size (a producer's of one shape), with
    C-level passes over the records instead of a Python step each: one ``unpack_from`` for every header and
    topic, one for every property block when they are of one length, the queue id and store host written a byte
    column at a time. None when the records are not all of one size or any check fails, and the record-by-record
    parse then says which and why."""
    end = len(records)
    fixed = HEADER_SIZE + len(topic)
    if end < fixed:
        return None
    size = SIZE.unpack_from(records)[0]
    if size <= fixed or end % size or end // size > max_count:
        return None
    n = end // size
    fields = _headers_of(size, n, len(topic)).unpack_from(records)
    variable = range(HEADER_SIZE, end, size)
    view = memoryview(records)
    if not (fields[0::7].count(size) == n and fields[1::7].count(MESSAGE_MAGIC) == n
            and fields[4::7].count(len(topic)) == n and min(body_lens := fields[3::7]) > 0
            and list(map(add, body_lens, props_lens := fields[5::7])).count(size - fixed) == n
            and fields[6::7].count(topic) == n
            and tuple(map(crc32, map(view.__getitem__, map(slice, variable, range(size, end + 1, size)))))
            == fields[2::7]):
        return None
    buf = bytearray(records)
    for column, byte in enumerate(QUEUE_ID.pack(queue_id), OFFSET_QUEUE_ID):
        buf[column::size] = bytes((byte,)) * n
    for column, byte in enumerate(store_host, OFFSET_STORE_HOST):
        buf[column::size] = bytes((byte,)) * n
    if props_lens.count(props_lens[0]) == n:
        blocks = _properties_of(size, n, fixed, props_lens[0]).unpack_from(records)
        # one block for all (the usual batch): one object, so whoever looks into them skips the repeats
        properties = [blocks[0]] * n if blocks.count(blocks[0]) == n else list(blocks)
    else:
        props_starts = range(fixed, end, size)
        properties = list(map(records.__getitem__, map(slice, props_starts, map(add, props_starts, props_lens))))
    return WireBatch(topic, queue_id, [size] * n, sum(body_lens), max(body_lens), max(props_lens), buf, properties)


@functools.lru_cache(maxsize=64)
def _headers_of(size: int, n: int, topic_len: int) -> struct.Struct:
    """The checked fields and the topic of ``n`` records of ``size`` bytes, side by side, as one struct."""
    return struct.Struct(">" + f"iII72xiBH{topic_len}s{size - HEADER_SIZE - topic_len}x" * n)


@functools.lru_cache(maxsize=64)
def _properties_of(size: int, n: int, fixed: int, props_len: int) -> struct.Struct:
    """The property blocks, all ``props_len`` long, of ``n`` records of ``size`` bytes whose blocks start at
    ``fixed``."""
    return struct.Struct(">" + f"{fixed}x{props_len}s{size - fixed - props_len}x" * n)


def _runs_shared(properties: Sequence[bytes]) -> list[bytes]:
    """``properties`` with each block equal to the one before it replaced by that one, every block ``bytes`` (what
    parsing the stored record gives: a caller's bytearray or memoryview is copied)."""
    shared: list[bytes] = []
    last = b""
    for props in properties:
        if props != last:
            last = props if type(props) is bytes else bytes(props)
        shared.append(last)
    return shared


def _what_is_wrong(records: bytes, pos: int, n: int, topic: bytes) -> str:
    size, magic, _crc, body_len, t_len, p_len = CHECKED_FIELDS.unpack_from(records, pos)
    if magic != MESSAGE_MAGIC:
        return f"record {n} has bad magic {magic:#x}"
    if size != HEADER_SIZE + t_len + p_len + body_len or pos + size > len(records):
        return f"record {n} has size {size} but its parts or the batch say otherwise"
    if body_len <= 0:
        return f"record {n} has an empty body"
    if t_len != len(topic) or not records.startswith(topic, pos + HEADER_SIZE):
        return f"record {n} is not of topic {topic.decode(errors='replace')}"
    return f"record {n} fails its CRC"
