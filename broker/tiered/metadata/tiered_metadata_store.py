"""What the tier holds: topics (reserve time, status), queues (min and max offsets in the tier) and file
segments (type, base offset, committed size, status, create / begin / end / seal times). The interface follows
the seed's TieredMetadataStore; the flat files own the bytes, this store owns what they mean."""

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from broker.tiered.provider.file_segment import FileSegmentType


class SegmentStatus(IntEnum):
    OPEN = 0  # the last segment of its flat file: takes appends
    SEALED = 1  # full (or followed by another): read-only
    EXPIRED = 2  # past the topic's reserve time: not read any more; its object is deleted next


@dataclass(slots=True)
class TopicMetadata:
    topic: str
    reserve_time_ms: int  # how long the tier keeps this topic's data; -1: the broker's default
    status: int = 0


class TieredMetadataTooNewError(OSError):
    """A metadata record holds fields this release does not know: a newer release wrote it (the broker does not
    start on it: it prints the message)."""


@dataclass(slots=True)
class QueueMetadata:
    topic: str
    queue_id: int
    min_offset: int  # first queue offset the tier serves
    max_offset: int  # one past the last queue offset committed to the tier
    update_ms: int = 0
    # The first queue offset whose tiered record keeps its commitlog offset (as the local commitlog wrote it).
    # Records below it were uploaded by an older version, which overwrote that field with the record's tiered
    # position; None: a record that older version wrote (every unit committed so far is of that kind).
    commit_log_offsets_from: int | None = None


@dataclass(slots=True)
class FileSegmentMetadata:
    path: str
    type: FileSegmentType
    topic: str
    queue_id: int
    base_offset: int  # byte offset in its flat file of the segment's first byte
    size: int  # bytes committed (the backend may hold more after a crash mid-upload)
    status: SegmentStatus = SegmentStatus.OPEN
    create_ms: int = 0
    begin_ms: int = 0  # store time of the first message it covers
    end_ms: int = 0  # store time of the last one
    seal_ms: int = 0

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass(frozen=True, slots=True)
class TieredMetadataCopy:
    """What a tier's metadata says, at one point, for a replica that shares the backend (``broker/tiered/replica/``):
    every record, or (``whole`` False) the records changed since the version the replica had. ``records`` is opaque
    outside the store that made it."""

    checkpoint: int  # the upload checkpoint stored with these records: everything below it is in the tier
    uploaded_end: int
    records: bytes
    version: str = ""  # what the replica asks the next copy since
    whole: bool = True


class TieredMetadataStore(ABC):
    # -- topics
    @abstractmethod
    def get_topic(self, topic: str) -> TopicMetadata | None:
        """The topic's record, or None."""

    @abstractmethod
    def iterate_topics(self) -> Iterator[TopicMetadata]:
        """Every topic record."""

    @abstractmethod
    def update_topic(self, metadata: TopicMetadata) -> None:
        """Create or replace the topic's record."""

    @abstractmethod
    def delete_topic(self, topic: str) -> None:
        """The topic, its queues and their segment records."""

    # -- queues
    @abstractmethod
    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        """The queue's record, or None."""

    @abstractmethod
    def iterate_queues(self, topic: str | None = None) -> Iterator[QueueMetadata]:
        """The queues of ``topic`` (of every topic when None)."""

    @abstractmethod
    def update_queue(self, metadata: QueueMetadata) -> None:
        """Create or replace the queue's record (its min and max after a commit or expiry)."""

    # -- segments
    @abstractmethod
    def iterate_segments(self, topic: str, queue_id: int, file_type: FileSegmentType) -> Iterator[FileSegmentMetadata]:
        """The queue's segments of one type in base-offset order."""

    @abstractmethod
    def update_segment(self, metadata: FileSegmentMetadata) -> None:
        """Create or replace a segment record (size, status, times)."""

    @abstractmethod
    def delete_segment(self, metadata: FileSegmentMetadata) -> None:
        """Drop a segment record (its object is gone)."""

    @abstractmethod
    def replace_segments(self, old: list[FileSegmentMetadata], new: FileSegmentMetadata) -> bool:
        """Atomically swap ``old`` (which must be stored exactly as given) for ``new``; False (nothing changed)
        if any of them differs from what is stored now. The compaction job commits through this."""

    # -- dispatcher checkpoint
    @abstractmethod
    def get_checkpoint(self) -> int:
        """The upload checkpoint: local commitlog offset of the oldest record not yet in the tier."""

    @abstractmethod
    def set_checkpoint(self, offset: int) -> None:
        """Store the upload checkpoint."""

    @abstractmethod
    def get_uploaded_end(self) -> int:
        """Local commitlog offset after the newest record the tier holds."""

    @abstractmethod
    def set_uploaded_end(self, offset: int) -> None:
        """Store the uploaded end (before the records it covers are committed), durably: the objects it covers
        are on the backend for good, and recovery compares it with the local end to cut what the commitlog lost."""

    @abstractmethod
    def get_reconcile_end(self) -> int | None:
        """The local commitlog end a recovery found below the uploaded end, until the tier was cut to it (None: no
        cut is due). Kept across restarts: a crash before the cut, after new messages took the commitlog past the
        uploaded end, would otherwise leave the tier holding what the commitlog lost."""

    @abstractmethod
    def set_reconcile_end(self, offset: int | None) -> None:
        """Store (durably) or clear the end a cut is due to; this broker's own, never copied to a replica."""

    def sync(self) -> None:  # noqa: B027 - optional hook
        """Make every write so far durable (before the answer that lets a job delete objects it covers)."""

    # -- copies (a replica sharing the backend follows its master's)
    @abstractmethod
    def copy(self, since: str = "") -> TieredMetadataCopy:
        """The records and the checkpoint at one point: those changed since the copy of version ``since`` when this
        store can tell which, else every record."""

    @abstractmethod
    def install(self, copy: TieredMetadataCopy) -> set[tuple[str, int]]:
        """The records become ``copy``'s (a whole copy replaces them all; a copy of changes applies to the copy
        it was asked since), atomically, except this store's own checkpoint (a replica's says where its own
        dispatch stands). Returns the queues (topic, queue id) whose records changed."""

    @abstractmethod
    def close(self) -> None:
        """Release the store."""
