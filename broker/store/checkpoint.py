"""A small durable file holding one commitlog offset: where a dispatcher's applied state is safe up to."""

import struct
import zlib
from pathlib import Path

from common.atomic_file import write_file_atomically

_FORMAT = struct.Struct(">qI")


class CheckpointNotWritten(OSError):
    """The new checkpoint was not written. The file is replaced atomically, so the one before it still holds (it
    names an older point, from which a restart replays more): a caller may go on and write it again later."""


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
        try:
            write_file_atomically(self.path, head + struct.pack(">I", zlib.crc32(head)))
        except OSError as exc:
            raise CheckpointNotWritten(exc.errno, f"checkpoint {self.path} not written: {exc.strerror}") from exc
