"""Outcome of an append: status, where the batch went, and its message ids."""

from dataclasses import dataclass, field
from enum import Enum

from common.message_id import make_message_id


class PutMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    NOT_ADMITTED = "NOT_ADMITTED"  # the caller's admit check said no under the commitlog's lock: nothing stored


@dataclass(slots=True)
class AppendResult:
    """Where a batch landed: each record's commitlog offset, the first queue offset, the store time,
    and the commitlog end after it (what a SYNC_FLUSH caller waits to see flushed)."""

    physical_offsets: list[int]
    queue_offset: int
    store_timestamp: int
    end_offset: int


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    error: str = ""
    append: AppendResult | None = None
    store_host: bytes = b""
    _offset_msg_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def queue_offset(self) -> int:
        return self.append.queue_offset if self.append else -1

    @property
    def physical_offset(self) -> int:
        return self.append.physical_offsets[0] if self.append else -1

    @property
    def offset_msg_ids(self) -> list[str]:
        """Store host and commitlog offset of each record (RocketMQ's offsetMsgId)."""
        if not self._offset_msg_ids and self.append:
            self._offset_msg_ids = [make_message_id(self.store_host, p) for p in self.append.physical_offsets]
        return self._offset_msg_ids
