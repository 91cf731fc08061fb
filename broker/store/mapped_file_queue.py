"""An ordered run of segments that reads as one unbounded byte stream (commitlog, consume queue)."""

import bisect
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.store.mapped_file import MappedFile, segment_name

log = logging.getLogger(__name__)


class SegmentsMissing(OSError):
    """A gap between the segments found at start: the storage's fault (a file lost or cut short), said on one line
    as a start refusal, not a bug's traceback."""


class MappedFileQueue:
    """Segments by start offset. Only the last is written. The segment list is replaced as a whole
    (copy on write), so readers on other threads never see it half-updated."""

    def __init__(self, store_dir: Path, mapped_file_size: int, close_grace_s: float = 30.0) -> None:
        self.store_dir = store_dir
        self.mapped_file_size = mapped_file_size
        self._files: tuple[MappedFile, ...] = ()
        self._starts: tuple[int, ...] = ()
        self._close_grace_s = close_grace_s
        self._pending_close: list[tuple[float, MappedFile]] = []
        # Guards changes of the segment list: the writer adds segments while the cleaner removes old ones.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()

    # -- loading and lookup ------------------------------------------------------------------------
    def load(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.store_dir.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for path in paths[:-1]:  # (the last may be empty: made just before a crash; it is made full size again)
            if path.stat().st_size == 0:
                raise SegmentsMissing(f"segment {path} is empty, with segments after it (it was cut short): "
                                      f"restore it, or this store from a replica or a backup")
        files = [MappedFile(p, self.mapped_file_size) for p in paths]
        for prev, cur in itertools.pairwise(files):
            if prev.end_offset != cur.file_from_offset:
                raise SegmentsMissing(f"segment {segment_name(prev.end_offset)} is missing in {self.store_dir}, "
                                      f"between {prev.path.name} and {cur.path.name} (or {prev.path.name} was cut "
                                      f"short): restore it, or this store from a replica or a backup")
        for f in files:  # positions are set by recovery; assume full until then
            f.wrote_position = f.flushed_position = f.file_size
        self._set(files)

    def _set(self, files: list[MappedFile]) -> None:
        self._files = tuple(files)
        self._starts = tuple(f.file_from_offset for f in files)

    @property
    def files(self) -> tuple[MappedFile, ...]:
        return self._files

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding ``offset``, or None if it was deleted or not written yet."""
        files, starts = self._files, self._starts
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        f = files[i]
        return f if offset < f.end_offset else None

    def last(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def first(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def min_offset(self) -> int:
        files = self._files
        return files[0].file_from_offset if files else 0

    def max_offset(self) -> int:
        """One past the last written byte."""
        files = self._files
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    def flushed_offset(self) -> int:
        """Everything below is on disk: the flushed end of the oldest segment that still has unflushed data, or
        the end of the last one. (After a roll the last segment alone would say nothing of the one before it.)"""
        files = self._files
        if not files:
            return 0
        offset = files[-1].file_from_offset + files[-1].flushed_position
        for f in reversed(files):  # unflushed data sits only in the newest segments: stop at a flushed one
            if f.flushed_position < f.wrote_position:
                offset = f.file_from_offset + f.flushed_position
            elif f is not files[-1]:
                break
        return offset

    # -- writing -----------------------------------------------------------------------------------
    def create_segment(self, start_offset: int) -> MappedFile:
        with self._lock:
            return self._create(start_offset)

    def _create(self, start_offset: int, size: int | None = None) -> MappedFile:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        last = self.last()
        assert last is None or start_offset >= last.end_offset, "segments only grow"
        f = MappedFile(self.store_dir / segment_name(start_offset), size or self.mapped_file_size)
        self._set([*self._files, f])
        return f

    def last_writable(self, size: int | None = None) -> MappedFile:
        """The segment to write into, rolling to a new one when the last is full (of ``size`` bytes when given: a
        replica's, as its master's segment)."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        with self._lock:  # decide again under the lock: one roll, whoever asks
            last = self.last()
            if last is None:
                return self._create(0, size)
            return self._create(last.end_offset, size) if last.is_full() else last

    def flush(self) -> int:
        """Flush every segment with unflushed data; returns the flushed offset. One flusher at a time (a slave's
        replication flushes beside the flush service, and a full segment's descriptor is closed by its flush)."""
        with self._flush_lock:
            for f in self._files:
                if f.flushed_position < f.wrote_position:
                    f.flush()
        return self.flushed_offset()

    def release_pages(self) -> None:
        """Unmap what readers faulted in below each segment's flushed position (see MappedFile.release_pages).
        Every segment, every time: a consumer catching up maps old ones again, and a pass over a segment
        with nothing mapped costs about a microsecond."""
        for f in self._files:
            f.release_pages()

    # -- truncation and deletion -------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Make ``offset`` the end: zero the tail of its segment (made durable first, so a crash midway recovers to
        ``offset``) and delete segments after it."""
        keep: list[MappedFile] = []
        deleted = False
        with self._flush_lock:  # a replica's flusher may be flushing the segments cut here
            for f in self._files:
                if f.end_offset <= offset:
                    keep.append(f)
                elif f.file_from_offset <= offset:
                    f.truncate_to(offset - f.file_from_offset)
                    keep.append(f)
                else:
                    f.destroy()
                    self._retire(f)
                    deleted = True
            self._set(keep)
        if deleted:  # the unlinks are durable too: a deleted segment never comes back after a crash
            directory = os.open(self.store_dir, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def reset_start(self, offset: int, size: int | None = None) -> MappedFile:
        """An empty queue that starts at ``offset`` (its head was deleted): one segment holding it, or with
        ``size``, the segment of that size that starts at ``offset``."""
        assert not self._files, "reset_start only on an empty queue"
        if size is not None:
            with self._lock:
                return self._create(offset, size)
        start = offset - offset % self.mapped_file_size
        f = self.create_segment(start)
        f.wrote_position = f.flushed_position = offset - start
        return f

    def delete_first(self, should_delete: Callable[[MappedFile], bool], max_count: int,
                     before_delete: Callable[[int], bool] | None = None) -> list[MappedFile]:
        """Delete leading segments while ``should_delete`` holds; never the last (the one written).
        ``before_delete(new_min_offset)`` runs once they are chosen; False keeps them all."""
        files = list(self._files)
        removed: list[MappedFile] = []
        while len(files) > 1 and len(removed) < max_count and should_delete(files[0]):
            removed.append(files.pop(0))
        if removed and before_delete is not None and not before_delete(files[0].file_from_offset):
            return []
        if removed:
            # Under the flush lock: a flush that had taken a segment deleted here reopened it by path to fsync it,
            # and the store stopped taking writes ("fsync of the commitlog failed: No such file") under forced
            # cleanup on a full disk.
            with self._flush_lock:
                with self._lock:  # from the list as it is now: a segment may have been added meanwhile
                    self._set([f for f in self._files if f not in removed])
                for f in removed:
                    f.destroy()
                    self._retire(f)
        return removed

    def _retire(self, f: MappedFile) -> None:
        self._pending_close.append((time.monotonic() + self._close_grace_s, f))

    def retired_bytes(self) -> int:
        """Size of deleted segments whose mappings are still open: their disk space returns when they close."""
        return sum(f.file_size for _due, f in self._pending_close)

    def close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        still: list[tuple[float, MappedFile]] = []
        for due, f in self._pending_close:
            if force or due <= now:
                f.close()
            else:
                still.append((due, f))
        self._pending_close = still

    def destroy_all(self) -> None:
        for f in self._files:
            f.destroy()
            f.close()
        self._set([])

    def shutdown(self, flush: bool = True) -> None:
        """Close every segment; ``flush=False`` after a failed fsync (retrying one proves nothing)."""
        if flush:
            self.flush()
        for f in self._files:
            f.close()
        self.close_retired(force=True)

    def __repr__(self) -> str:
        return f"MappedFileQueue({self.store_dir}, {len(self._files)} segments)"


def segment_age_hours(f: MappedFile) -> float:
    try:
        return (time.time() - f.path.stat().st_mtime) / 3600
    except FileNotFoundError:
        return float("inf")


__all__ = ["MappedFileQueue", "segment_age_hours"]
