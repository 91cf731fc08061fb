"""Segments as files under a directory (``tieredBackendServiceProvider=posix``; the directory may be a mounted
network filesystem). Each write is fsynced before it returns."""

import os
import tempfile
from pathlib import Path

from broker.tiered.provider.file_segment import FileSegment


def check_posix_root(root: Path) -> None:
    """The broker's startup check of its posix tier (``tieredStoreFilePath``): the directory is made if missing and
    a file written, fsynced and removed there. Raises OSError naming the key: a directory the broker could not
    write failed every upload, retried for ever, while every local segment was kept for them."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=root)  # a name no segment path takes
        try:
            os.write(fd, b"tier write check")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        where = f": {exc.filename!r}" if exc.filename else ""
        raise OSError(f"tieredStoreFilePath={root}: the posix tier's directory cannot be created or written: "
                      f"{exc.strerror or exc}{where}") from None


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
