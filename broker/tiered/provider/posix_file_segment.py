"""Segments as files under a directory (``tieredBackendServiceProvider=posix``; the directory may be a mounted
network filesystem). Each write is fsynced before it returns."""

import os
from pathlib import Path

from broker.tiered.provider.file_segment import FileSegment


class PosixFileSegment(FileSegment):
    def __init__(self, root: Path, path: str) -> None:
        super().__init__(path)
        self.file = root / path

    def real_size(self) -> int:
        try:
            return self.file.stat().st_size
        except FileNotFoundError:
            return 0

    def write(self, position: int, data: bytes) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.file, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, position)
            os.ftruncate(fd, position + len(data))  # a torn tail from before a crash goes
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def read(self, position: int, length: int) -> bytes:
        try:
            fd = os.open(self.file, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(fd, length, position)
        finally:
            os.close(fd)

    def destroy(self) -> None:
        self.file.unlink(missing_ok=True)
