"""The messages of a pull, decoded when first read: a pull hands over the stored bytes of a run of records, and
a consumer that counts, skips or forwards them never pays for a ``MessageExt`` per record.

Every record is located (and its size and magic checked) up front; its CRC is checked when it is decoded.
"""

import logging
import struct
from collections.abc import Iterator, Sequence
from typing import overload

from client.errors import MQClientError
from common.message import MessageExt
from common.message_codec import MESSAGE_MAGIC, SIZE_MAGIC, CorruptRecordError, decode_record
from common.message_queue import MessageQueue
from common.wire_batch import OFFSET_QUEUE_OFFSET

log = logging.getLogger(__name__)

QUEUE_OFFSET = struct.Struct(">q")


class PulledMessages(Sequence[MessageExt]):
    def __init__(self, records: bytes, offset_delta: int = 0, queue_id: int | None = None) -> None:
        """``offset_delta`` shifts queue offsets (static topics: physical to logic); ``queue_id`` replaces the
        records' own (static topics: the logic queue)."""
        self._view = memoryview(records)
        self._positions = _locate(self._view)
        self._decoded: list[MessageExt | None] = [None] * len(self._positions)
        self._offset_delta = offset_delta
        self._queue_id = queue_id

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def nbytes(self) -> int:
        """Size of the records as pulled."""
        return len(self._view)

    @overload
    def __getitem__(self, index: int) -> MessageExt: ...

    @overload
    def __getitem__(self, index: slice) -> list[MessageExt]: ...

    def __getitem__(self, index: int | slice) -> MessageExt | list[MessageExt]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        msg = self._decoded[index]
        if msg is None:
            msg = self._decoded[index] = self._decode(self._positions[index])
        return msg

    def __iter__(self) -> Iterator[MessageExt]:
        for i in range(len(self._positions)):
            yield self[i]

    def queue_offset_at(self, index: int) -> int:
        """The queue offset of record ``index``, read from its header (no decoding)."""
        pos = self._positions[index] + OFFSET_QUEUE_OFFSET
        return int(QUEUE_OFFSET.unpack_from(self._view, pos)[0]) + self._offset_delta

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"PulledMessages({len(self)} records)"

    def _decode(self, pos: int) -> MessageExt:
        try:
            msg = decode_record(self._view, pos)
        except CorruptRecordError as exc:
            raise MQClientError(f"pulled a corrupt record: {exc}") from None
        msg.queue_offset += self._offset_delta
        if self._queue_id is not None:
            msg.queue_id = self._queue_id
        return msg


def _locate(view: memoryview) -> list[int]:
    positions = []
    unpack = SIZE_MAGIC.unpack_from
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < SIZE_MAGIC.size:
            raise MQClientError(f"pulled records end in a cut record at byte {pos}")
        size, magic = unpack(view, pos)
        if magic != MESSAGE_MAGIC or size <= 0 or pos + size > end:
            raise MQClientError(f"pulled a corrupt record at byte {pos}: size {size}, magic {magic:#x}")
        positions.append(pos)
        pos += size
    return positions



def deliverable(msgs: Sequence[MessageExt], index: int, mq: MessageQueue) -> MessageExt | None:
    """Message ``index`` of a pull for a push consumer's handler; None when its record fails its check
    (:func:`skipped_corrupt`)."""
    try:
        return msgs[index]
    except MQClientError as exc:
        skipped_corrupt(msgs, index, mq, exc)
        return None


def skipped_corrupt(msgs: Sequence[MessageExt], index: int, mq: MessageQueue, exc: MQClientError) -> None:
    """Say that a push consumer skips record ``index``: its bytes fail their check (damaged on the broker's disk,
    where reads check only the header). It fails again at every pull: handled as a failure, it stopped its queue
    for good (its offset never committed, the next member met it again). Nothing of it can be trusted, so it is not
    sent back for a retry either."""
    offset = msgs.queue_offset_at(index) if isinstance(msgs, PulledMessages) else -1
    log.error("pulled_record_corrupt queue=%s offset=%d error=%r action=skipped", mq, offset, str(exc))
