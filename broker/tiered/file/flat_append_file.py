"""A flat file: an ordered list of segments of one type for one queue, giving an unbounded byte stream.

Offsets are byte offsets in the stream. Only the last segment takes appends; a segment that would overflow is
sealed and a new one starts at the stream's end (a record never straddles segments). Appends are buffered in
memory and written by ``commit``; the committed offset only moves after the backend made the bytes durable
and the metadata store recorded the new size. Readers see committed bytes only.

After a crash, ``load`` trusts the backend: a segment holding more than its recorded size keeps those bytes
(unreferenced: nothing pointed at them yet) and appends continue after them; so a cut (``cut_to``) is made in the
backend before the records. A promoted replica's load of its master's records (``LoadMode.TAKE_OVER``) also finds
the segments the master expired or opened after the copy.

With a ``read_ahead`` (a backend where every read is a round trip: S3), reads go through blocks of committed
bytes kept in a bounded cache (:mod:`read_ahead_cache`) instead of one backend read each.
"""

import dataclasses
import functools
import itertools
import logging
import threading
import time
from bisect import bisect_right
from enum import Enum

from broker.tiered.file.read_ahead_cache import ReadAhead
from broker.tiered.metadata.tiered_metadata_store import FileSegmentMetadata, SegmentStatus, TieredMetadataStore
from broker.tiered.provider.file_segment import FileSegment, FileSegmentType
from broker.tiered.provider.file_segment_factory import FileSegmentFactory, segment_path

log = logging.getLogger(__name__)

_file_ids = itertools.count()  # a flat file's part of its read-ahead cache keys (the cache may be shared)


class LoadMode(Enum):
    """How far a flat file's load trusts the backend over its metadata records."""

    RECOVER = "recover"  # checked against the backend: a crash may have left more (or a lost object less)
    FOLLOW = "follow"  # as recorded: a replica's copy of its master's records, read only, re-read every copy
    TAKE_OVER = "take_over"  # a promoted replica's copy: as RECOVER, and what the master did after the copy counts


def _date_unknown(m: FileSegmentMetadata, now_ms: int) -> None:
    """Bytes of ``m`` whose store times are unknown were stored before ``now_ms``: never dated older than that, as
    the tier's time-based expiry reads ``end_ms`` (0 would make the segment look 56 years old once sealed)."""
    m.begin_ms = m.begin_ms or now_ms
    m.end_ms = max(m.end_ms, now_ms)


class FlatAppendFile:
    def __init__(self, factory: FileSegmentFactory, metadata: TieredMetadataStore, broker_name: str, topic: str,
                 queue_id: int, file_type: FileSegmentType, segment_size: int, unit: int = 1,
                 read_ahead: ReadAhead | None = None) -> None:
        self.factory = factory
        self.metadata = metadata
        self.broker_name = broker_name
        self.topic, self.queue_id, self.file_type = topic, queue_id, file_type
        self.segment_size = segment_size
        self.unit = unit  # bytes of a whole entry (consume queue); a committed size is a multiple of it
        self.segments: list[FileSegmentMetadata] = []  # readable segments, base-offset order
        self._objects: dict[str, FileSegment] = {}
        self._buffer: list[tuple[bytes, int]] = []  # (data, store time) appended, not committed
        self._buffer_start = 0  # stream offset of the first buffered byte
        # A segment whose bytes are in the backend but whose record a refused write (a full local disk) left
        # behind: the next commit writes it first. The bytes are never written twice.
        self._unrecorded: FileSegmentMetadata | None = None
        # EXPIRED records found at load (left for the Spark cleanup job, or by a deletion a crash cut short): an
        # expiry that deletes removes them first.
        self._expired_left: list[FileSegmentMetadata] = []
        self._append_offset = 0
        self._lock = threading.Lock()  # segments list and committed sizes (readers vs commit vs expiry)
        self.read_ahead = read_ahead
        self._cache_id = next(_file_ids)
        self._generation = 0  # bumped when committed bytes are forgotten: what was cached before is not hit
        self._fetch_lock = threading.Lock()  # one backend read a block at a time (concurrent misses wait for it)

    # -- state ---------------------------------------------------------------------------------------
    def load(self, start_offset: int = 0, mode: LoadMode = LoadMode.RECOVER) -> None:
        """Segments from the metadata store; ``start_offset`` is where an empty flat file starts. How far the
        backend is trusted over the records: see :class:`LoadMode`."""
        self._generation += 1
        every = list(self.metadata.iterate_segments(self.topic, self.queue_id, self.file_type))
        segments = [m for m in every if m.status is not SegmentStatus.EXPIRED]
        self._expired_left = [m for m in every if m.status is SegmentStatus.EXPIRED]
        if mode is LoadMode.TAKE_OVER:
            segments = self._without_expired_since_copy(segments)
        if mode is not LoadMode.FOLLOW:
            segments, every = self._checked_against_backend(segments, every)
        end = max([start_offset, *(e.end_offset for e in every)]) if every else start_offset
        if mode is LoadMode.TAKE_OVER:
            end = self._adopt_successors(segments, end)
        self.segments = segments
        self._append_offset = self._buffer_start = end

    def _checked_against_backend(self, segments: list[FileSegmentMetadata], every: list[FileSegmentMetadata],
                                 ) -> tuple[list[FileSegmentMetadata], list[FileSegmentMetadata]]:
        """The last segment takes the backend's size (a crash mid-upload may have left more, dated now: a segment
        first written by that upload has no times recorded yet); a segment whose object holds less than recorded
        (a lost object) ends the readable stream there."""
        now_ms = int(time.time() * 1000)
        for i, m in enumerate(segments):
            if m.size and not m.end_ms:  # adopted (below) by a broker that left such bytes undated
                _date_unknown(m, now_ms)
                self.metadata.update_segment(m)
            real = self._object(m.path).real_size()
            real -= real % self.unit
            last = i == len(segments) - 1
            if real == m.size or (real > m.size and not last):
                continue
            log.warning("tiered_segment_size_reconciled path=%s recorded=%d backend=%d", m.path, m.size, real)
            if real > m.size:  # bytes a crash left unrecorded: their store times are not known here
                _date_unknown(m, now_ms)
            m.size = real
            self.metadata.update_segment(m)
            if not last:  # bytes are missing: nothing after them can be served
                for lost in segments[i + 1:]:
                    self.metadata.delete_segment(lost)
                segments = segments[: i + 1]
                every = [e for e in every if e.base_offset <= m.base_offset]
                m.status = SegmentStatus.OPEN
                self.metadata.update_segment(m)
                break
        return segments, every

    def _without_expired_since_copy(self, segments: list[FileSegmentMetadata]) -> list[FileSegmentMetadata]:
        """A copy's first sealed segments whose objects are gone were expired by the master after the copy: their
        records go (read as lost bytes, they would end the stream before everything that is there)."""
        while (len(segments) > 1 and segments[0].status is SegmentStatus.SEALED and segments[0].size
               and self._object(segments[0].path).real_size() == 0):
            gone = segments.pop(0)
            self.metadata.delete_segment(gone)
            log.info("tiered_segment_expired_since_copy path=%s", gone.path)
        return segments

    def _adopt_successors(self, segments: list[FileSegmentMetadata], end: int) -> int:
        """Segments the master opened after the copy (a segment's object is named by its base offset, which is its
        predecessor's end) are recorded, so that appends continue after their bytes instead of opening them anew
        (which would truncate them). Returns the stream's end."""
        now_ms = int(time.time() * 1000)
        while True:
            path = segment_path(self.broker_name, self.topic, self.queue_id, self.file_type, end)
            size = self._object(path).real_size()
            size -= size % self.unit
            if not size:
                return end
            if segments and segments[-1].status is SegmentStatus.OPEN:
                self._seal(segments[-1])
            m = FileSegmentMetadata(path, self.file_type, self.topic, self.queue_id, end, size, SegmentStatus.OPEN,
                                    create_ms=now_ms)
            _date_unknown(m, now_ms)
            self.metadata.update_segment(m)
            segments.append(m)
            log.warning("tiered_segment_adopted path=%s bytes=%d: written by the master after the copy", path, size)
            end += size

    def cut_to(self, offset: int) -> None:
        """Forget committed bytes from ``offset`` on (the consume queue after its commitlog lost bytes): in the
        backend first, then in the records. Cut in the records only, the bytes stayed in the last object, and a
        load after a later crash took them back as a crash's unrecorded tail (see :meth:`_checked_against_backend`):
        units of lost records served again, and the queue offsets new messages took counted as held."""
        self._cut_objects(offset)
        with self._lock:
            self._generation += 1
            keep = [m for m in self.segments if m.base_offset < offset]
            for m in self.segments[len(keep):]:
                self.metadata.delete_segment(m)
            if keep and keep[-1].end_offset > offset:
                keep[-1].size = offset - keep[-1].base_offset
                keep[-1].status = SegmentStatus.OPEN
                self.metadata.update_segment(keep[-1])
            self.segments = keep
            self._append_offset = self._buffer_start = max(offset, keep[-1].end_offset if keep else offset)

    def _cut_objects(self, offset: int) -> None:
        """The backend's bytes from ``offset`` on go, oldest object first, before any record changes. A crash
        part-way leaves the records as they were over objects shorter than recorded: the load ends the stream at the
        first such object, and the caller's cut is done again at the restart (the dispatcher's stored uploaded end
        still exceeds the local commitlog's, see ``TieredDispatcher.truncate_dirty``)."""
        with self._lock:
            segments = [m for m in self.segments if m.end_offset > offset or m.base_offset >= offset]
        for m in segments:
            if m.base_offset < offset:
                self._object(m.path).truncate(offset - m.base_offset)
            else:
                self._object(m.path).destroy()
                self._objects.pop(m.path, None)

    def restart_at(self, offset: int) -> None:
        """Every segment stops being read (recorded EXPIRED: the objects stay for the cleanup job, or the next
        expiry that deletes) and the stream restarts, empty, at ``offset`` (at or past its end). A record refused
        part-way leaves the segments served: a retry records them all again."""
        assert not self.uncommitted and offset >= self._append_offset, \
            f"{self.topic}:{self.queue_id}: restart at {offset} with {self._append_offset} appended"
        with self._lock:
            gone = list(self.segments)
        for m in gone:
            self.metadata.update_segment(dataclasses.replace(m, status=SegmentStatus.EXPIRED))
        with self._lock:
            self._generation += 1
            for m in gone:
                m.status = SegmentStatus.EXPIRED
            self._expired_left += gone
            self.segments = []
            self._append_offset = self._buffer_start = offset

    @property
    def min_offset(self) -> int:
        segments = self.segments
        return segments[0].base_offset if segments else self._buffer_start

    @property
    def commit_offset(self) -> int:
        segments = self.segments
        return segments[-1].end_offset if segments else self._buffer_start

    @property
    def append_offset(self) -> int:
        return self._append_offset

    @property
    def buffered_bytes(self) -> int:
        return self._append_offset - self._buffer_start

    @property
    def uncommitted(self) -> bool:
        """Whether a commit has work: buffered bytes, or a segment's record a refused write left behind."""
        return self.buffered_bytes > 0 or self._unrecorded is not None

    def total_bytes(self) -> int:
        return sum(m.size for m in self.segments)

    # -- write ---------------------------------------------------------------------------------------
    def append(self, data: bytes, store_time: int) -> int:
        """Buffer ``data``; returns the stream offset it will have. Whole units that exceed a segment are split
        at unit boundaries (a run of consume-queue units); anything else must fit in one segment."""
        offset = self._append_offset
        if len(data) > self.segment_size:
            if self.unit == 1:  # a record never straddles segments (the uploader checks first: this is a bug)
                raise ValueError(f"{self.topic}:{self.queue_id}: {len(data)} bytes exceed a {self.file_type.name} "
                                 f"segment of {self.segment_size} bytes")
            step = self.segment_size - self.segment_size % self.unit
            for at in range(0, len(data), step):
                self._buffer.append((data[at : at + step], store_time))
        else:
            self._buffer.append((data, store_time))
        self._append_offset += len(data)
        return offset

    def commit(self) -> int:
        """Write the buffer to segments (rolling when one fills); returns the new commit offset. If the backend
        fails, what was not written goes back to the buffer for the next commit."""
        buffer, self._buffer = self._buffer, []
        i = 0
        try:
            if self._unrecorded is not None:
                self._record(self._unrecorded)
            while i < len(buffer):
                last = self._writable()
                room = self.segment_size - last.size
                chunk: list[bytes] = []
                size = 0
                begin = buffer[i][1]
                j = i
                while j < len(buffer) and size + len(buffer[j][0]) <= room:
                    chunk.append(buffer[j][0])
                    size += len(buffer[j][0])
                    j += 1
                if not chunk:  # the next entry does not fit: seal this one, the next round opens a new one
                    self._seal(last)
                    continue
                self._object(last.path).write(last.size, b"".join(chunk))
                with self._lock:
                    last.size += size
                    last.begin_ms = last.begin_ms or begin
                    last.end_ms = buffer[j - 1][1]
                self._buffer_start += size
                i = j  # in the backend: whatever happens to its record, these bytes are not written again
                self._record(last)
        except BaseException:
            self._buffer = buffer[i:] + self._buffer
            raise
        return self.commit_offset

    def _writable(self) -> FileSegmentMetadata:
        if self.segments and self.segments[-1].status is SegmentStatus.OPEN:
            return self.segments[-1]
        base = self.commit_offset
        now = int(time.time() * 1000)
        m = FileSegmentMetadata(segment_path(self.broker_name, self.topic, self.queue_id, self.file_type, base),
                                self.file_type, self.topic, self.queue_id, base, 0, SegmentStatus.OPEN, create_ms=now)
        self._object(m.path).write(0, b"")  # a stale object left by a crash before its record was written
        self.metadata.update_segment(m)
        with self._lock:
            self.segments.append(m)
        return m

    def _record(self, m: FileSegmentMetadata) -> None:
        """Write ``m``'s record; refused, it is written first by the next commit (a restart also adopts the
        backend's real size, see :meth:`load`)."""
        self._unrecorded = m
        self.metadata.update_segment(m)
        self._unrecorded = None

    def _seal(self, m: FileSegmentMetadata) -> None:
        """Sealed once its record says so: refused, the segment stays open and the next commit seals it."""
        seal_ms = int(time.time() * 1000)
        self.metadata.update_segment(dataclasses.replace(m, status=SegmentStatus.SEALED, seal_ms=seal_ms))
        m.status, m.seal_ms = SegmentStatus.SEALED, seal_ms

    def _object(self, path: str) -> FileSegment:
        obj = self._objects.get(path)
        if obj is None:  # setdefault: a reader, the read-ahead and the writer share one object (its chunk list)
            obj = self._objects.setdefault(path, self.factory.open(path))
        return obj

    # -- read ----------------------------------------------------------------------------------------
    def read(self, offset: int, length: int) -> bytes:
        """Committed bytes ``[offset, offset + length)``, across segments if needed; short past the end."""
        out: list[bytes] = []
        with self._lock:
            segments = list(self.segments)
        bases = [m.base_offset for m in segments]
        i = bisect_right(bases, offset) - 1
        while length > 0 and 0 <= i < len(segments):
            m = segments[i]
            if offset >= m.end_offset:
                break
            n = min(length, m.end_offset - offset)
            position = offset - m.base_offset
            if self.read_ahead is None:
                data = self._object(m.path).read(position, n)
            else:
                data = self._read_ahead(m, position, n)
            out.append(data)
            if len(data) < n:
                break
            offset += n
            length -= n
            i += 1
        return out[0] if len(out) == 1 else b"".join(out)

    def _read_ahead(self, m: FileSegmentMetadata, position: int, length: int) -> bytes:
        """``length`` committed bytes of segment ``m`` from ``position``, through the read-ahead blocks."""
        assert self.read_ahead is not None
        if length <= 0:
            return b""
        block_size = self.read_ahead.block_size
        end = position + length
        committed = max(m.size, end)  # a block is fetched up to here (never past the committed bytes)
        out: list[bytes] = []
        while position < end:
            lo = position - position % block_size
            hi = min(lo + block_size, end)
            block, fetched = self._block(m.path, lo, min(lo + block_size, committed), hi)
            out.append(block[position - lo : hi - lo])
            if len(block) < hi - lo:  # the backend holds less (a lost object): short
                break
            position = hi
        else:
            # a second read in a block (a reader going through it, not one read at a random place): the next
            # block is fetched in the background while this one is read
            nxt = lo + block_size
            if not fetched and nxt < m.size:
                key = (self._cache_id, self._generation, m.path, nxt)
                block_end = min(nxt + block_size, m.size)
                cache = self.read_ahead.cache
                if not cache.holds(key, block_end - nxt):
                    cache.prefetch(key, functools.partial(self._block, m.path, nxt, block_end, block_end))
        return out[0] if len(out) == 1 else b"".join(out)

    def _block(self, path: str, lo: int, block_end: int, need_end: int) -> tuple[bytes, bool]:
        """The block of segment ``path`` starting at ``lo``, holding at least the bytes up to ``need_end`` (fewer
        only if the backend has fewer): from the cache, else read from the backend up to ``block_end`` (only
        the part not cached yet, when the segment grew since the block was cached). And whether this call
        read the backend."""
        assert self.read_ahead is not None
        cache = self.read_ahead.cache
        key = (self._cache_id, self._generation, path, lo)
        data = cache.get(key)
        if data is not None and len(data) >= need_end - lo:
            return data, False
        with self._fetch_lock:
            data = cache.get(key)  # another reader (or the read-ahead) may have fetched it meanwhile
            have = len(data) if data is not None else 0
            if have >= need_end - lo:
                assert data is not None
                return data, False
            more = self._object(path).read(lo + have, block_end - lo - have)
            data = data + more if data else more
            cache.put(key, data)
            return data, True

    def segment_at(self, offset: int) -> FileSegmentMetadata | None:
        with self._lock:
            segments = list(self.segments)
        i = bisect_right([m.base_offset for m in segments], offset) - 1
        return segments[i] if 0 <= i < len(segments) and offset < segments[i].end_offset else None

    # -- compaction ----------------------------------------------------------------------------------
    def replace(self, old: list[FileSegmentMetadata], merged: FileSegmentMetadata) -> bool:
        """Swap consecutive sealed segments for one object holding the same bytes (the compaction job's
        commit). False, changing nothing, if they are not exactly what this file serves now, or if the merged
        object does not hold their bytes (deleted meanwhile: another run's garbage collection took it for one of
        its own leftovers; swapped in, the records named an object that was gone). Readers that took the old list
        keep reading the old objects, which the job deletes only after a grace period. Asks the backend: call it
        off the event loop."""
        real = self.factory.open(merged.path).real_size()  # (not cached: a refused object is not this file's)
        if real < merged.size:
            log.warning("tiered_replace_refused topic=%s queue=%d path=%s size=%d real_size=%d reason='the merged "
                        "object does not hold the parts' bytes (gone, or cut short)'", self.topic, self.queue_id,
                        merged.path, merged.size, real)
            return False
        with self._lock:
            paths = [m.path for m in self.segments]
            if not old or old[0].path not in paths:
                return False
            i = paths.index(old[0].path)
            current = self.segments[i : i + len(old)]
            ok = (current == old and all(m.status is SegmentStatus.SEALED for m in old)
                  and i + len(old) < len(self.segments)  # never the segment being written
                  and merged.base_offset == old[0].base_offset and merged.size == sum(m.size for m in old)
                  and merged.status is SegmentStatus.SEALED and merged.type is self.file_type)
            if not ok or not self.metadata.replace_segments(old, merged):
                return False
            self.segments[i : i + len(old)] = [merged]
        log.info("tiered_segments_replaced topic=%s queue=%d type=%s old=%d base=%d bytes=%d path=%s", self.topic,
                 self.queue_id, self.file_type.name, len(old), merged.base_offset, merged.size, merged.path)
        return True

    # -- expiry --------------------------------------------------------------------------------------
    def expire_before(self, offset: int, delete: bool) -> list[FileSegmentMetadata]:
        """Sealed segments ending at or before ``offset`` stop being read; with ``delete`` their objects and
        records go now, otherwise they are marked EXPIRED for the cleanup job."""
        with self._lock:
            gone = [m for m in self.segments if m.status is SegmentStatus.SEALED and m.end_offset <= offset]
            self.segments = [m for m in self.segments if m not in gone]
        recorded = deleted = 0  # of ``gone``
        try:
            if delete:
                while self._expired_left:
                    self._delete(self._expired_left[0])
                    self._expired_left.pop(0)
            for m in gone:
                # Recorded EXPIRED before its object goes: a sealed record whose object is gone reads at a restart
                # as bytes lost mid-stream, and every segment after it would be cut (see load).
                self.metadata.update_segment(dataclasses.replace(m, status=SegmentStatus.EXPIRED))
                m.status = SegmentStatus.EXPIRED
                recorded += 1
                if delete:
                    self._delete(m)
                    deleted += 1
        except BaseException:
            # A write refused (a full disk): the segments not recorded EXPIRED are still recorded SEALED, so they
            # are served again, as after a restart: the broker never serves less than its records say (the cleanup
            # job deletes what they say EXPIRED, the compaction swaps what they say SEALED). One recorded EXPIRED
            # whose deletion failed is deleted by the next pass, as after a restart.
            with self._lock:
                self.segments = sorted([*gone[recorded:], *self.segments], key=lambda s: s.base_offset)
            if delete:
                self._expired_left += gone[deleted:recorded]
            raise
        return gone

    def destroy_objects(self) -> None:
        """Every object of this stream goes (its topic was deleted); the records are the caller's to drop after. A
        retry after a failure part-way deletes again what is gone already (``FileSegment.destroy`` is idempotent)."""
        with self._lock:
            doomed = [*self._expired_left, *self.segments, *([self._unrecorded] if self._unrecorded else [])]
        # and those an expiry marked for the cleanup job since the load (kept by their records only)
        known = {m.path for m in doomed}
        doomed += [m for m in self.metadata.iterate_segments(self.topic, self.queue_id, self.file_type)
                   if m.status is SegmentStatus.EXPIRED and m.path not in known]
        for m in doomed:
            self._object(m.path).destroy()
        with self._lock:
            self.segments, self._expired_left, self._unrecorded, self._buffer = [], [], None, []
            self._objects.clear()
            self._generation += 1  # nothing cached before is hit

    def _delete(self, m: FileSegmentMetadata) -> None:
        """An expired segment's object, then its record (a crash between the two leaves an EXPIRED record)."""
        self._object(m.path).destroy()
        self.metadata.delete_segment(m)
        self._objects.pop(m.path, None)
