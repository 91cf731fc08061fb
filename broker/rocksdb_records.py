"""Records of a raw-mode RocksDB sent to another broker (a slave's copy of its master's POP state or tier
metadata): back to back, key length (>I), key, value length (>I), value. A value length of ``GONE`` (no value
follows) says the record was deleted: a copy of what changed carries deletions too."""

import struct
from collections.abc import Iterable, Iterator

LENGTH = struct.Struct(">I")
GONE = 0xFFFFFFFF
_GONE = LENGTH.pack(GONE)


def encode_records(items: Iterable[tuple[bytes, bytes | None]]) -> bytes:
    """``items`` as one byte string; a value None says the record is gone."""
    parts: list[bytes] = []
    for key, value in items:
        if value is None:
            parts += (LENGTH.pack(len(key)), key, _GONE)
        else:
            parts += (LENGTH.pack(len(key)), key, LENGTH.pack(len(value)), value)
    return b"".join(parts)


def decode_records(data: bytes, what: str) -> Iterator[tuple[bytes, bytes | None]]:
    """The (key, value or None) pairs of ``data``; ValueError naming ``what`` if it is cut short."""
    view, pos, end = memoryview(data), 0, len(data)
    while pos < end:
        key, pos = _field(view, pos, end, what)
        if pos + LENGTH.size <= end and LENGTH.unpack_from(view, pos)[0] == GONE:
            pos += LENGTH.size
            yield key, None
            continue
        value, pos = _field(view, pos, end, what)
        yield key, value


def _field(view: memoryview, pos: int, end: int, what: str) -> tuple[bytes, int]:
    start = pos + LENGTH.size
    if start > end or start + LENGTH.unpack_from(view, pos)[0] > end:
        raise ValueError(f"{what} cut short at byte {pos} of {end}")
    stop = start + LENGTH.unpack_from(view, pos)[0]
    return bytes(view[start:stop]), stop
