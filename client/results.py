"""What SDK calls return."""

from dataclasses import dataclass, field
from enum import Enum

from common.message import MessageExt
from common.message_id import make_message_id
from common.message_queue import MessageQueue


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a send landed: the queue, the first message's queue offset, and the message ids (the store
    host and each message's commitlog offset, turned into ids only when read)."""

    queue: MessageQueue
    queue_offset: int
    store_host: bytes = b""
    physical_offsets: tuple[int, ...] = ()

    @property
    def msg_id(self) -> str:
        return make_message_id(self.store_host, self.physical_offsets[0]) if self.physical_offsets else ""

    @property
    def msg_ids(self) -> tuple[str, ...]:
        """Every message of a batch, in order."""
        return tuple(make_message_id(self.store_host, p) for p in self.physical_offsets)

    @property
    def count(self) -> int:
        return len(self.physical_offsets)


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
