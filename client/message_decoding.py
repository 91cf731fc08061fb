"""Pulled records to messages, with the exact tag check the broker's hash filter cannot make."""

from collections.abc import Sequence
from functools import lru_cache

from client.errors import MQClientError
from client.pulled_messages import PulledMessages
from common.message import MessageExt
from common.subscription import parse_sub_expression


@lru_cache(maxsize=1024)
def _tags(sub_expression: str) -> frozenset[str] | None:
    try:
        return parse_sub_expression(sub_expression)
    except ValueError as exc:
        raise MQClientError(str(exc)) from None


def decode_pulled(records: bytes, offset_delta: int, sub_expression: str,
                  queue_id: int | None = None) -> Sequence[MessageExt]:
    """The pulled messages, decoded when read (CRC-checked then), queue offsets shifted by ``offset_delta`` and
    queue ids set to ``queue_id`` (static topics: the logic queue and its offsets); with a tag expression, only
    the messages whose tag is subscribed (the broker filters by tag hash, which can collide)."""
    messages = PulledMessages(records, offset_delta, queue_id)
    tags = _tags(sub_expression)
    if tags is None:
        return messages
    return [m for m in messages if m.tags in tags]
