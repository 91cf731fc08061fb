"""What SDK calls return."""

from dataclasses import dataclass, field
from enum import Enum

from common.message import MessageExt
from common.message_queue import MessageQueue


@dataclass(frozen=True, slots=True)
class SendResult:
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    msg_ids: tuple[str, ...] = ()  # every message of a batch, in order


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    messages: list[MessageExt] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
