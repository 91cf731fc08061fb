"""Messages to wire properties (producer side) and raw records to messages (consumer side)."""

import itertools
import os
from collections.abc import Sequence

from client.errors import MQClientError
from common.message import Message
from common.message_properties import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQUE_KEY,
    USER_SET_PROPERTIES,
    encode_properties,
    reserved_property_refusal,
    user_properties_refusal,
)

_PREFIX = os.urandom(8).hex().upper()
_RESERVED = frozenset((NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR))
_counter = itertools.count()


_UNIQUE_HEAD = f"{PROPERTY_UNIQUE_KEY}{NAME_VALUE_SEPARATOR}{_PREFIX}"
_UNIQUE_ONLY = (_UNIQUE_HEAD + "{:012X}" + PROPERTY_SEPARATOR).format


def new_unique_key() -> str:
    """Unique per message across processes: a random per-process prefix and a counter."""
    return f"{_PREFIX}{next(_counter):012X}"


def batch_wire_properties(msgs: Sequence[Message], allowed: frozenset[str] = USER_SET_PROPERTIES) -> list[bytes]:
    """Each message's wire properties with a new unique key; a plain message (no tags, keys, properties or delay,
    the common case of a high-rate producer) costs one format, and a batch of them one more scan. ``allowed``: the
    reserved names the messages' properties may hold (see :func:`wire_properties`)."""
    out: list[bytes | None] = [_UNIQUE_ONLY(next(_counter)).encode()
                               if not (m.tags or m.keys or m.properties or m.delay_level or m.deliver_at_ms)
                               else None for m in msgs]
    if None in out:
        _fill_in(msgs, out, allowed)
    return out  # type: ignore[return-value]  # every None was filled in


def _fill_in(msgs: Sequence[Message], out: list[bytes | None], allowed: frozenset[str]) -> None:
    """The properties of the messages that are not plain. A batch is stored as one: all its messages are
    delayed, or none (the broker refuses a mix too). A unique key the message already carries (a ``UNIQ_KEY``
    property: the v2 proxy passes on its client's message id) is kept, as upstream's MessageClientIDSetter does."""
    delayed = 0
    for i, m in enumerate(msgs):
        if out[i] is None:
            out[i] = wire_properties(m, m.properties.get(PROPERTY_UNIQUE_KEY) or new_unique_key(), allowed)
            delayed += 1 if m.delay_level or m.deliver_at_ms else 0
    if 0 < delayed < len(msgs):
        raise MQClientError(f"a batch is all delayed or all immediate: {delayed} of {len(msgs)} messages have a "
                            "delay_level or deliver_at_ms; send them as separate batches")


def wire_properties(msg: Message, unique_key: str, allowed: frozenset[str] = USER_SET_PROPERTIES) -> bytes:
    """The message's properties in wire form, with tags, keys and the unique key it is indexed by. Its own
    properties may not use a reserved name but those in ``allowed`` (a half message's add the transaction's)."""
    head = f"{PROPERTY_UNIQUE_KEY}{NAME_VALUE_SEPARATOR}{unique_key}{PROPERTY_SEPARATOR}"
    keys = KEY_SEPARATOR.join(msg.key_list())
    if _RESERVED.intersection(msg.tags or "") or _RESERVED.intersection(keys):
        raise MQClientError("tags and keys may not contain the characters \\x01 or \\x02")
    if msg.tags:
        head += f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}{msg.tags}{PROPERTY_SEPARATOR}"
    if keys:
        head += f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}{keys}{PROPERTY_SEPARATOR}"
    if msg.delay_level or msg.deliver_at_ms:
        head += _delay_property(msg)
    properties = msg.properties
    refusal = reserved_property_refusal(properties, allowed)
    if refusal is not None:
        raise MQClientError(refusal)
    if PROPERTY_UNIQUE_KEY in properties:  # written once, first (see _fill_in)
        properties = {name: value for name, value in properties.items() if name != PROPERTY_UNIQUE_KEY}
    try:
        user = encode_properties(properties) if properties else b""
    except ValueError as exc:
        raise MQClientError(str(exc)) from None
    try:
        raw = head.encode() + user
    except UnicodeEncodeError as exc:  # a lone surrogate in the tags or keys: not text UTF-8 can carry
        raise MQClientError(f"tags and keys must be text UTF-8 can encode: {exc.reason} "
                            f"({exc.object[exc.start:exc.end]!r})") from None
    refusal = user_properties_refusal(len(raw))  # the broker's limit for a send: refused before sending
    if refusal is not None:
        raise MQClientError(refusal)
    return raw


def _delay_property(msg: Message) -> str:
    """DELAY or TIMER_DELIVER_MS; what the SDK can tell is wrong is refused here (the level's upper bound and
    the longest delay are the broker's settings: it refuses those)."""
    level, at = msg.delay_level, msg.deliver_at_ms
    if not isinstance(level, int) or not isinstance(at, int) or isinstance(level, bool) or isinstance(at, bool):
        raise MQClientError(f"delay_level and deliver_at_ms are integers, not {level!r} and {at!r}")
    if level and at:
        raise MQClientError(f"a message has a delay_level ({level}) or a deliver_at_ms ({at}), not both")
    if level < 0:
        raise MQClientError(f"delay_level {level} is negative: levels are 1..N (0: not delayed)")
    if at < 0:
        raise MQClientError(f"deliver_at_ms {at} is negative: it is a time in epoch milliseconds")
    if level:
        return f"{PROPERTY_DELAY}{NAME_VALUE_SEPARATOR}{level}{PROPERTY_SEPARATOR}"
    return f"{PROPERTY_TIMER_DELIVER_MS}{NAME_VALUE_SEPARATOR}{at}{PROPERTY_SEPARATOR}"
