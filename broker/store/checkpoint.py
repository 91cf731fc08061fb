"""A small durable file holding one commitlog offset: where a dispatcher's applied state is safe up to."""

import struct
import zlib
from pathlib import Path

from common.atomic_file import write_file_atomically

_FORMAT = struct.Struct(">qI")


class OffsetCheckpoint:
    """Written atomically (temp file, fsync, rename), CRC-checked on read; missing or bad reads as None."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> int | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) != _FORMAT.size:
            return None
        offset, crc = _FORMAT.unpack(raw)
        return offset if zlib.crc32(raw[:8]) == crc else None

    def write(self, offset: int) -> None:
        assert offset >= 0, f"checkpoint offset {offset} is negative"
        head = struct.pack(">q", offset)
        write_file_atomically(self.path, head + struct.pack(">I", zlib.crc32(head)))
