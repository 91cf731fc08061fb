"""What SDK calls return."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from common.message import MessageExt
from common.message_id import make_message_id
from common.message_properties import UNIQUE_KEY_NEEDLE, find_property
from common.message_queue import MessageQueue


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but not on disk within syncFlushTimeout (SYNC_FLUSH)


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a send landed, as RocketMQ users know it: ``status``, ``msg_id`` (the unique key the producer gave
    the message, RocketMQ's msgId), ``offset_msg_id`` (store host and commitlog offset: where the broker put it),
    the queue and the first message's queue offset. Ids are derived only when read."""

    queue: MessageQueue
    queue_offset: int
    store_host: bytes = b""
    physical_offsets: tuple[int, ...] = ()
    status: SendStatus = SendStatus.SEND_OK
    wire_properties: Sequence[bytes] = field(default=(), repr=False, compare=False)
    recall_handles: tuple[str, ...] = field(default=(), repr=False)  # a delayed send's: Producer.recall takes one

    @property
    def recall_handle(self) -> str:
        """A delayed message's handle for ``Producer.recall``; "" for a message that was not delayed."""
        return self.recall_handles[0] if self.recall_handles else ""

    @property
    def msg_id(self) -> str:
        ids = self.msg_ids
        return ids[0] if ids else ""

    @property
    def msg_ids(self) -> tuple[str, ...]:
        """Every message of a batch, in order (its offset id where a message carries no unique key)."""
        keys = tuple(_unique_key(p) for p in self.wire_properties)
        if keys and all(keys):
            return keys  # type: ignore[return-value]
        return self.offset_msg_ids

    @property
    def offset_msg_id(self) -> str:
        return make_message_id(self.store_host, self.physical_offsets[0]) if self.physical_offsets else ""

    @property
    def offset_msg_ids(self) -> tuple[str, ...]:
        return tuple(make_message_id(self.store_host, p) for p in self.physical_offsets)

    @property
    def count(self) -> int:
        return len(self.physical_offsets)

    def __str__(self) -> str:
        return (f"SendResult [sendStatus={self.status.value}, msgId={self.msg_id}, offsetMsgId={self.offset_msg_id}, "
                f"messageQueue={self.queue}, queueOffset={self.queue_offset}]")


def _unique_key(wire_properties: bytes) -> str | None:
    raw = find_property(wire_properties, UNIQUE_KEY_NEEDLE)
    return raw.decode() if raw else None


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    messages: Sequence[MessageExt] = field(default_factory=list)  # decoded when read (client/pulled_messages.py)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
