"""Pulled records to messages, with the exact tag check the broker's hash filter cannot make."""

from functools import lru_cache

from client.errors import MQClientError
from common.message import MessageExt
from common.message_codec import CorruptRecordError, decode_records
from common.subscription import parse_sub_expression


@lru_cache(maxsize=1024)
def _tags(sub_expression: str) -> frozenset[str] | None:
    try:
        return parse_sub_expression(sub_expression)
    except ValueError as exc:
        raise MQClientError(str(exc)) from None


def decode_pulled(records: bytes, offset_delta: int, sub_expression: str) -> list[MessageExt]:
    """Decode (CRC-checked), shift queue offsets by ``offset_delta`` (static topics: physical to logic),
    and drop messages whose tag is not subscribed."""
    try:
        messages = decode_records(records)
    except CorruptRecordError as exc:
        raise MQClientError(f"pulled a corrupt record: {exc}") from None
    if offset_delta:
        for m in messages:
            m.queue_offset += offset_delta
    tags = _tags(sub_expression)
    if tags is not None:
        messages = [m for m in messages if m.tags in tags]
    return messages
