"""What a recall of a delayed message writes and checks: the handles a delayed send answers, the marker record that
takes a timer back (``TimerMessageStore`` applies it), and whether a stored timer is the handle's message."""

from collections.abc import Sequence

from common.message_codec import decode_record
from common.message_id import make_message_id
from common.message_properties import (
    PROPERTY_REAL_TOPIC,
    REAL_TOPIC_NEEDLE,
    TIMER_OUT_MS_NEEDLE,
    UNIQUE_KEY_NEEDLE,
    find_property,
)
from common.recall_handle import MAX_MESSAGE_ID_CHARS, RecallHandle

PROPERTY_RECALLED_ID = "RECALLED_ID"  # a recall marker's: the id of the message taken back


def message_id(timer_properties: bytes, store_host: bytes, physical_offset: int) -> str:
    """The id a recall handle names a delayed message by: its unique key (the id its producer knows), else (none, or
    one no handle can carry) the offset id of its timer-topic record."""
    key = find_property(timer_properties, UNIQUE_KEY_NEEDLE)
    if key and key.isascii() and len(key) <= MAX_MESSAGE_ID_CHARS:
        return key.decode()
    return make_message_id(store_host, physical_offset)


def recall_handles(broker_name: str, timer_properties: Sequence[bytes], store_host: bytes,
                   physical_offsets: Sequence[int]) -> list[str]:
    """One handle a message of a delayed batch stored in the timer topic (``timer_properties``: its records')."""
    handles = []
    for props, offset in zip(timer_properties, physical_offsets, strict=True):
        due = find_property(props, TIMER_OUT_MS_NEEDLE)
        assert due is not None and due.isdigit(), "a timer-topic record without its due time"
        handles.append(RecallHandle(broker_name, int(due), offset, message_id(props, store_host, offset)).encode())
    return handles


def marker_properties(topic: str, handle: RecallHandle) -> bytes:
    """A recall marker's properties, for operators reading the timer topic: the message's topic and id (the timer
    it takes out is its body, as for every marker)."""
    return f"{PROPERTY_REAL_TOPIC}\x01{topic}\x02{PROPERTY_RECALLED_ID}\x01{handle.message_id}\x02".encode()


def is_handle_of(record: bytes, topic: str, handle: RecallHandle) -> bool:
    """Whether the stored timer-topic ``record`` is the message ``handle`` names, of ``topic``: a handle cannot
    recall another topic's message (the caller's permission was checked on ``topic``)."""
    msg = decode_record(record, verify_crc=False)  # a copy the timer store made of a checked record
    return (find_property(msg.raw_properties, REAL_TOPIC_NEEDLE) == topic.encode()
            and message_id(msg.raw_properties, msg.raw_store_host, handle.physical_offset) == handle.message_id)
