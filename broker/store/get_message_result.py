"""Outcome of reading a queue: status, the records, and where the consumer goes next."""

from dataclasses import dataclass, field
from enum import Enum


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MESSAGE = "NO_MESSAGE"  # the queue is empty
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # messages were there but none passed the tag filter
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: caught up
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    # Whole records, as stored: one an item, or (``get_message(runs=True)``) records that follow one another in
    # the commitlog as one item.
    messages: list[bytes] = field(default_factory=list)
    total_bytes: int = 0
