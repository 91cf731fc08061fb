"""Messages to wire properties (producer side) and raw records to messages (consumer side)."""

import itertools
import os
from collections.abc import Sequence

from client.errors import MQClientError
from common.message import Message
from common.message_properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQUE_KEY,
    encode_properties,
)

_PREFIX = os.urandom(8).hex().upper()
_RESERVED = frozenset((NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR))
_counter = itertools.count()


_UNIQUE_HEAD = f"{PROPERTY_UNIQUE_KEY}{NAME_VALUE_SEPARATOR}{_PREFIX}"
_UNIQUE_ONLY = (_UNIQUE_HEAD + "{:012X}" + PROPERTY_SEPARATOR).format


def new_unique_key() -> str:
    """Unique per message across processes: a random per-process prefix and a counter."""
    return f"{_PREFIX}{next(_counter):012X}"


def batch_wire_properties(msgs: Sequence[Message]) -> list[bytes]:
    """Each message's wire properties with a new unique key; a plain message (no tags, keys or properties, the
    common case of a high-rate producer) costs one format."""
    return [_UNIQUE_ONLY(next(_counter)).encode() if not (m.tags or m.keys or m.properties)
            else wire_properties(m, new_unique_key()) for m in msgs]


def wire_properties(msg: Message, unique_key: str) -> bytes:
    """The message's properties in wire form, with tags, keys and the unique key it is indexed by."""
    head = f"{PROPERTY_UNIQUE_KEY}{NAME_VALUE_SEPARATOR}{unique_key}{PROPERTY_SEPARATOR}"
    keys = KEY_SEPARATOR.join(msg.key_list())
    if _RESERVED.intersection(msg.tags or "") or _RESERVED.intersection(keys):
        raise MQClientError("tags and keys may not contain the characters \\x01 or \\x02")
    if msg.tags:
        head += f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}{msg.tags}{PROPERTY_SEPARATOR}"
    if keys:
        head += f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}{keys}{PROPERTY_SEPARATOR}"
    try:
        user = encode_properties(msg.properties) if msg.properties else b""
    except ValueError as exc:
        raise MQClientError(str(exc)) from None
    return head.encode() + user
