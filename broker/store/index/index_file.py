"""A hash index file: key hash -> chain of (commitlog offset, store time) entries, newest first.

Layout: a 40-byte header (begin/end store time in ms, begin/end commitlog offset, slot count, entry
count), ``slot_num`` 4-byte slots holding the newest entry of their chain, then ``index_num`` 20-byte
entries (key hash, commitlog offset, seconds since begin, previous entry). Entry 0 means "none".
Hash collisions are expected: callers check the message itself.

Entries are written through the mapping, so every block is allocated (``posix_fallocate``) before it is
written: a write fault on a block the file system cannot allocate kills the process with SIGBUS, where
``posix_fallocate`` says ENOSPC (an OSError: the dispatch fails and the store fail-stops, see ``running_flags``).
The header and slots are allocated when the file is created, the entries ``RESERVE_STEP`` bytes at a time.
"""

import functools
import mmap
import os
import struct
import zlib
from collections import deque
from collections.abc import Sequence
from itertools import chain, repeat
from operator import add, itemgetter, mod, mul
from pathlib import Path

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
HEADER_SIZE = HEADER.size
ENTRY_SIZE = ENTRY.size
RESERVE_STEP = 1 << 20  # bytes of entries allocated at once


HASH_MASK = 0x7FFFFFFF
# Entries written in one pass: with the default 500,000 slots, two of 64 share one about once in 250 chunks.
CHUNK = 64


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode()) & HASH_MASK


def _seconds_since(begin: int, store_ts: int) -> int:
    """An entry's store time as seconds since the file's first entry; 0 for one stored before it (a clock step
    back)."""
    return (store_ts - begin) // 1000 if store_ts > begin else 0


@functools.lru_cache(maxsize=64)
def _entries_of(n: int) -> struct.Struct:
    """``n`` entries side by side, as one struct."""
    return struct.Struct(">" + "iqii" * n)


class IndexFile:
    def __init__(self, path: Path, slot_num: int, index_num: int) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self._entries_at = HEADER_SIZE + slot_num * SLOT.size
        self._allocated = 0  # bytes from the start known to be allocated (a loaded file: checked when written)
        self._size = self._entries_at + index_num * ENTRY_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size == 0:
                self._create(fd)
            self._size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, self._size)
        finally:
            os.close(fd)
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         _slots, self.index_count) = HEADER.unpack_from(self.mm, 0)
        self.index_count = max(self.index_count, 1)

    @staticmethod
    def size_for(slot_num: int, index_num: int) -> int:
        return HEADER_SIZE + slot_num * SLOT.size + index_num * ENTRY_SIZE

    def _create(self, fd: int) -> None:
        """Size a new file and allocate its header and slots; on a full disk remove it and raise."""
        try:
            os.ftruncate(fd, self._size)
            self._reserve(fd, self._entries_at + ENTRY_SIZE)
        except OSError:
            self.path.unlink(missing_ok=True)
            raise

    def _reserve(self, fd: int | None, end: int) -> None:
        """Allocate blocks up to ``end`` (rounded up by RESERVE_STEP) before anything is written there."""
        if end <= self._allocated:
            return
        end = min(max(end, self._allocated + RESERVE_STEP), self._size)
        own = fd is None
        fd = os.open(self.path, os.O_RDWR) if fd is None else fd
        try:
            os.posix_fallocate(fd, self._allocated, end - self._allocated)
        finally:
            if own:
                os.close(fd)
        self._allocated = end

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_batch(self, hashes: Sequence[int], offsets: Sequence[int], timestamps: Sequence[int]) -> int:
        """Add entries (key hash, commitlog offset, store time) while there is room; returns how many were added.
        A hash is ``key_hash`` of the ``topic#key``."""
        n = min(len(hashes), self.index_num - self.index_count)
        if n <= 0:
            return 0
        if self.index_count == 1:
            self.begin_timestamp = timestamps[0]
            self.begin_phy_offset = offsets[0]
        count = self.index_count
        self._reserve(None, self._entries_at + (count + n) * ENTRY_SIZE)
        for i in range(0, n, CHUNK):
            j = min(i + CHUNK, n)
            self._put_chunk(count + i, hashes[i:j], offsets[i:j], timestamps[i:j])
        self.index_count = count + n
        self.end_timestamp = max(self.end_timestamp, timestamps[n - 1])
        self.set_end(max(self.end_phy_offset, offsets[n - 1] + 1))  # header stays current even if we fill up
        return n

    def _put_chunk(self, count: int, hashes: Sequence[int], offsets: Sequence[int], timestamps: Sequence[int]) -> None:
        """Entries from number ``count`` on, in C-level passes when no two share a slot (a chunk is small enough for
        that to be the common case), else one by one."""
        n = len(hashes)
        slots = list(map(add, map(mul, map(mod, hashes, repeat(self.slot_num, n)), repeat(SLOT.size)),
                         repeat(HEADER_SIZE)))
        if len(set(slots)) < n:  # an entry chains to one before it in the chunk
            self._put_each(count, hashes, offsets, timestamps)
            return
        begin = self.begin_timestamp
        if timestamps.count(timestamps[0]) == n:  # one batch's (the common case)
            seconds = [_seconds_since(begin, timestamps[0])] * n
        else:
            seconds = list(map(_seconds_since, repeat(begin, n), timestamps))
        previous = list(map(itemgetter(0), map(SLOT.unpack_from, repeat(self.mm, n), slots)))
        _entries_of(n).pack_into(self.mm, self._entries_at + count * ENTRY_SIZE,
                                 *chain.from_iterable(zip(hashes, offsets, seconds, previous, strict=True)))
        deque(map(SLOT.pack_into, repeat(self.mm, n), slots, range(count, count + n)), 0)

    def _put_each(self, count: int, hashes: Sequence[int], offsets: Sequence[int], timestamps: Sequence[int]) -> None:
        mm, slot_num, begin = self.mm, self.slot_num, self.begin_timestamp
        slot_unpack, slot_pack, entry_pack = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        entry_pos = self._entries_at + count * ENTRY_SIZE
        for h, physical_offset, store_ts in zip(hashes, offsets, timestamps, strict=True):
            slot_pos = HEADER_SIZE + (h % slot_num) * SLOT.size
            (previous,) = slot_unpack(mm, slot_pos)
            entry_pack(mm, entry_pos, h, physical_offset, _seconds_since(begin, store_ts), previous)
            slot_pack(mm, slot_pos, count)
            count += 1
            entry_pos += ENTRY_SIZE

    def set_end(self, end_phy_offset: int) -> None:
        """Record progress: every record below ``end_phy_offset`` has been indexed (or had no key)."""
        self._reserve(None, HEADER_SIZE)
        self.end_phy_offset = end_phy_offset
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.slot_num, self.index_count)

    def lookup(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commitlog offsets of entries whose key hash matches, newest first, roughly within the time
        range (second granularity: callers filter exactly)."""
        h = key_hash(key)
        entry = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.slot_num) * SLOT.size)[0]
        out: list[int] = []
        seen = 0
        while 0 < entry < self.index_count and len(out) < max_num and seen < self.index_num:
            eh, phy, seconds, prev = ENTRY.unpack_from(self.mm, self._entries_at + entry * ENTRY_SIZE)
            t = self.begin_timestamp + seconds * 1000
            if eh == h and begin_ms - 1000 <= t <= end_ms + 1000:
                out.append(phy)
            if prev >= entry:
                break
            entry = prev
            seen += 1
        return out

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        if not self.mm.closed:
            self.mm.close()

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
