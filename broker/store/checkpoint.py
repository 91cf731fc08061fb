"""A small durable file holding one commitlog offset: where a dispatcher's applied state is safe up to."""

import os
import struct
import zlib
from pathlib import Path

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        head = struct.pack(">q", offset)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, head + struct.pack(">I", zlib.crc32(head)))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
