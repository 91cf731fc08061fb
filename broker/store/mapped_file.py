"""One fixed-size segment file, named by the offset of its first byte (20 digits).

Writes go through ``pwrite`` (into the page cache: six times faster here than first-touch writes
through a mapping) that keeps the GIL (``pwrite_holding_gil``: getting it back costs more than such a write);
reads copy out of a shared mapping of the same pages, so no view outlives a closed mapping. The descriptor
is kept only while the file can still be written.

Every page a reader touches stays in the mapping, and so in the broker's RSS, until it is unmapped: the reput
alone reads every record once, so RSS would grow with everything written. :meth:`MappedFile.release_pages`
drops them again (the store's periodic services call it); the data stays in the page cache.
"""

import contextlib
import errno
import logging
import mmap
import os
from pathlib import Path

from broker.store.pwrite_holding_gil import pwrite_holding_gil

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE


def segment_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


class MappedFile:
    def __init__(self, path: Path, file_size: int) -> None:
        self.path = path
        self.file_from_offset = int(path.name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        actual = os.fstat(fd).st_size
        if actual == 0:
            os.ftruncate(fd, file_size)
            actual = file_size
        self.file_size = actual  # an existing file keeps its size even if the config changed
        self.mm = mmap.mmap(fd, actual)
        self._fd: int | None = fd
        self.wrote_position = 0
        self.flushed_position = 0

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def _writer(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        assert pos + len(data) <= self.file_size, f"write of {len(data)} at {pos} overflows {self.path.name}"
        fd = self._writer()
        written = pwrite_holding_gil(fd, data, pos)
        while written < len(data):  # a nearly full disk took part of it: the next call says why (ENOSPC)
            more = pwrite_holding_gil(fd, memoryview(data)[written:], pos + written)
            if more <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
            written += more

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position and advance it; returns where it went. A write the disk refused
        part-way leaves nothing past the write position: what it took would be whole records there, which
        recovery takes for stored ones (a write refused as "nothing appended", stored after all)."""
        pos = self.wrote_position
        try:
            self.write_at(pos, data)
        except OSError:
            self._cut_from(pos)
            raise
        self.wrote_position = pos + len(data)
        return pos

    def _cut_from(self, pos: int) -> None:
        """Zero the file from ``pos`` as holes (shrinking frees blocks even on a full disk), durably."""
        fd = self._writer()
        os.ftruncate(fd, pos)
        os.ftruncate(fd, self.file_size)
        os.fdatasync(fd)

    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos : pos + size]

    def release_pages(self) -> None:
        """Unmap the pages readers faulted in below the flushed position, so they stop counting in RSS.

        On a shared file mapping MADV_DONTNEED only drops this process's page table entries: the pages stay in
        the page cache (a dirty one stays dirty there), so the next read maps the same page again with a minor
        fault and no I/O, and nothing written, flushed or not, is lost. Only the flushed part is released
        because the unflushed tail is what the reput and tailing consumers read next, not for safety."""
        end = self.flushed_position - self.flushed_position % PAGE_SIZE
        if end <= 0:
            return
        # ValueError: closed meanwhile (a consume queue reset by the dispatcher), nothing left to unmap.
        with contextlib.suppress(ValueError):
            self.mm.madvise(mmap.MADV_DONTNEED, 0, end)

    def flush(self) -> int:
        """fdatasync what was written since the last flush; returns the flushed position (what was written when
        the fsync began: an append racing it is flushed next time). A file is done with its descriptor once it is
        flushed to its end (an append that filled it during the fsync still needs the descriptor)."""
        target = self.wrote_position
        if target > self.flushed_position:
            os.fdatasync(self._writer())
            self.flushed_position = target
        if self.flushed_position >= self.file_size and self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return self.flushed_position

    def truncate_to(self, pos: int) -> None:
        """Zero everything from ``pos`` on (a torn tail) and make ``pos`` the write position. Cutting the file
        and growing it back zeroes the tail as holes: no write of up to a whole segment of zeros (this runs at
        every start, before anything reads the mapping)."""
        if pos < self.file_size:
            self._cut_from(pos)
        self.wrote_position = self.flushed_position = pos

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self.mm.closed:
            self.mm.close()

    def destroy(self) -> None:
        """Remove the file now; the mapping stays readable until :meth:`close` (readers may still use it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)
        log.info("segment_deleted file=%s", self.path)

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"
