"""Message properties: RocketMQ's wire form ``name\\x01value\\x02...`` and the reserved names.

The store parses only what dispatch needs (tags, keys, unique key) with ``bytes.find``,
so no dict is built per message on the hot path.
"""

import zlib
from collections.abc import Collection, Mapping

from common import transaction_topic
from common.topic_validator import TOPIC_MAX_LENGTH
from common.transaction_topic import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
)

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQUE_KEY = "UNIQ_KEY"
# Static topics: the SDK reads logic offsets back from these (set by the broker on pull).
PROPERTY_STATIC_LOGIC_QUEUE = "__LOGIC_QUEUE"
# Delayed and timed messages (upstream's names). Set by the producer: a delay level (1..levels of
# messageDelayLevel; 0 or absent: not delayed) or an absolute delivery time in epoch ms.
PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# Set by the broker on the timer topic's record: where and when to deliver it.
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_REAL_LOGIC_QID = "REAL_LOGIC_QID"  # a static topic's delayed message: its logic queue (REAL_QID: physical)
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"

MAX_PROPERTIES_SIZE = 32767

_B_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_B_PROPERTY = PROPERTY_SEPARATOR.encode()


def encode_properties(properties: Mapping[str, str]) -> bytes:
    for name, value in properties.items():
        if not name or any(sep in name or sep in value for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)):
            raise ValueError(f"property {name!r} has an empty name or a reserved separator character")
    return "".join(f"{n}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for n, v in properties.items()).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    """Bytes that are not UTF-8 read as U+FFFD: brokers refuse such properties, but one stored before they did
    must not fail every reader of the message."""
    result: dict[str, str] = {}
    for pair in raw.decode(errors="replace").split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


def repaired_properties(raw: bytes) -> dict[str, str]:
    """The properties of a stored block, made fit to encode again whatever the producer wrote (sends check the
    block's size, not its contents): bytes that are not UTF-8 replaced, pairs without a name dropped, a stray
    separator in a value dropped. For the broker's own copies of a message (a dead letter), which must not fail
    on a message someone else stored."""
    result: dict[str, str] = {}
    for pair in raw.decode(errors="replace").split(PROPERTY_SEPARATOR):
        name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
        if name:
            result[name] = value.replace(NAME_VALUE_SEPARATOR, "")
    return result


def find_property(raw: bytes, name: bytes) -> bytes | None:
    """The raw value of ``name`` (given as ``b"NAME\\x01"``), found at a pair boundary, or None."""
    if raw.startswith(name):
        start = len(name)
    else:
        at = raw.find(_B_PROPERTY + name)
        if at < 0:
            return None
        start = at + 1 + len(name)
    end = raw.find(_B_PROPERTY, start)
    return raw[start:] if end < 0 else raw[start:end]


TAGS_NEEDLE = PROPERTY_TAGS.encode() + _B_NAME_VALUE
KEYS_NEEDLE = PROPERTY_KEYS.encode() + _B_NAME_VALUE
UNIQUE_KEY_NEEDLE = PROPERTY_UNIQUE_KEY.encode() + _B_NAME_VALUE
DELAY_NEEDLE = PROPERTY_DELAY.encode() + _B_NAME_VALUE
TIMER_DELIVER_MS_NEEDLE = PROPERTY_TIMER_DELIVER_MS.encode() + _B_NAME_VALUE
REAL_TOPIC_NEEDLE = PROPERTY_REAL_TOPIC.encode() + _B_NAME_VALUE
REAL_QID_NEEDLE = PROPERTY_REAL_QID.encode() + _B_NAME_VALUE
REAL_LOGIC_QID_NEEDLE = PROPERTY_REAL_LOGIC_QID.encode() + _B_NAME_VALUE
TIMER_OUT_MS_NEEDLE = PROPERTY_TIMER_OUT_MS.encode() + _B_NAME_VALUE


def strip_properties(raw: bytes, names: Collection[bytes]) -> bytes:
    """``raw`` without the pairs named in ``names`` (bare names, as bytes), every kept pair ended by the separator."""
    kept = [pair for pair in raw.split(_B_PROPERTY) if pair and pair.partition(_B_NAME_VALUE)[0] not in names]
    return b"".join(pair + _B_PROPERTY for pair in kept)


def tags_code(tags: bytes | str | None) -> int:
    """Hash of a tag stored in the consume queue; 0 means "no tag". Stable across processes."""
    if not tags:
        return 0
    if isinstance(tags, str):
        tags = tags.encode()
    return zlib.crc32(tags) or 1


def properties_tags_code(raw: bytes) -> int:
    """The tags code of a record's property block (wire form)."""
    return tags_code(find_property(raw, TAGS_NEEDLE)) if TAGS_NEEDLE in raw else 0


# Consumer groups: a retried or dead-lettered message keeps where it came from and how often it was retried.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
# A FIFO message's message group (upstream's sharding key; the v2 proxy maps message_group to it)
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
# A RocketMQ 5 client's host name (its born_host), kept by the v2 proxy: the record's born host is the proxy's
PROPERTY_BORN_HOST = "__BORNHOST"


# -- the room a producer's block leaves for the broker's own properties -------------------------------------------
# The broker's own writes add properties to a producer's block: a retry (RETRY_TOPIC, ORIGIN_MESSAGE_ID,
# RECONSUME_TIME, then the timer's REAL_TOPIC, REAL_QID and TIMER_OUT_MS), a dead letter (the first three), a
# delayed message (the timer's, with REAL_LOGIC_QID on a static topic), a half message (REAL_TOPIC, REAL_QID) and
# its copy once its checks ran out (TRANSACTION_CHECK_TIMES). A send leaves room for all of them at once, each at
# the largest value it can take, so none of those writes fails on a block the send accepted.
_MESSAGE_ID_CHARS = 128  # ORIGIN_MESSAGE_ID: the SDK's ids have 28, offset ids 32, the v2 proxy takes up to 128
_INT32_DIGITS = len(str(2**31 - 1))  # counts and queue ids
_EPOCH_MS_DIGITS = len(str(2**63 - 1))  # TIMER_OUT_MS
_BROKER_ADDED = {
    PROPERTY_RETRY_TOPIC: TOPIC_MAX_LENGTH,
    PROPERTY_ORIGIN_MESSAGE_ID: _MESSAGE_ID_CHARS,
    PROPERTY_RECONSUME_TIME: _INT32_DIGITS,
    PROPERTY_REAL_TOPIC: TOPIC_MAX_LENGTH,  # a %RETRY% topic too
    PROPERTY_REAL_QID: _INT32_DIGITS,
    PROPERTY_REAL_LOGIC_QID: _INT32_DIGITS,
    PROPERTY_TIMER_OUT_MS: _EPOCH_MS_DIGITS,
    PROPERTY_TRANSACTION_CHECK_TIMES: _INT32_DIGITS,
}
# Each pair is name, value and two separators; + 1: the separator added to a block that does not end with one.
BROKER_PROPERTIES_HEADROOM = 1 + sum(len(name) + chars + 2 for name, chars in _BROKER_ADDED.items())  # 567
MAX_USER_PROPERTIES_SIZE = MAX_PROPERTIES_SIZE - BROKER_PROPERTIES_HEADROOM  # 32200


def user_properties_refusal(size: int) -> str | None:
    """Why a producer's property block of ``size`` bytes is refused (None: it is not): the SDK, the broker's send
    and the v2 proxy say the same."""
    if size <= MAX_USER_PROPERTIES_SIZE:
        return None
    return (f"the message's properties (tags, keys and the rest) are {size} bytes: at most "
            f"{MAX_USER_PROPERTIES_SIZE} (the broker keeps {BROKER_PROPERTIES_HEADROOM} of its {MAX_PROPERTIES_SIZE} "
            "for what it adds to retried, dead-lettered, delayed and transactional messages)")


# -- the names a producer may not use for properties of its own -----------------------------------------------
# Every PROPERTY_* name of the project (here and with the transactions' topics: names added there are reserved too
# without a second list to keep in step). The broker finds a name's first pair and readers keep its last, so a
# producer's own TAGS, KEYS or RECONSUME_TIME beside the SDK's made them disagree: a tag subscriber skipped the
# message, a key found nothing, a retry count came from the producer. Upstream's putUserProperty refuses them too.
RESERVED_PROPERTIES = frozenset(
    value for name, value in [*globals().items(), *vars(transaction_topic).items()]
    if name.startswith("PROPERTY_") and isinstance(value, str) and value not in (NAME_VALUE_SEPARATOR,
                                                                                 PROPERTY_SEPARATOR))
# What a message's properties may hold of them: its unique key (kept: the v2 proxy passes its client's message id),
# its message group (the sharding key) and born host (the v2 proxy's client's); a half message also the
# transaction's marks (set by the SDK).
USER_SET_PROPERTIES = frozenset((PROPERTY_UNIQUE_KEY, PROPERTY_SHARDING_KEY, PROPERTY_BORN_HOST))
HALF_MESSAGE_PROPERTIES = USER_SET_PROPERTIES | {PROPERTY_TRANSACTION_PREPARED, PROPERTY_PRODUCER_GROUP}


def reserved_property_refusal(names: Collection[str], allowed: frozenset[str] = USER_SET_PROPERTIES) -> str | None:
    """Why a producer's properties named ``names`` are refused (None: they are not)."""
    if RESERVED_PROPERTIES.isdisjoint(names):
        return None
    taken = sorted(name for name in names if name in RESERVED_PROPERTIES and name not in allowed)
    if not taken:
        return None
    return (f"property {taken[0]!r} is reserved (the SDK and the broker write it): use the message's tags, keys, "
            "delay_level or deliver_at_ms, or another name")
