"""Messages as users see them: what a producer sends and what a consumer receives."""

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field

from common.message_id import decode_host, make_message_id
from common.message_properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQUE_KEY,
    decode_properties,
)


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` are indexed for query-by-key; ``tags`` filter on the broker.

    Delayed: ``delay_level`` N (1..the broker's ``messageDelayLevel`` count, by default 18: 1s 5s 10s 30s 1m ...
    2h; 0 = not delayed) or ``deliver_at_ms`` (an absolute time, epoch ms, at most ``timerMaxDelaySec`` ahead;
    one in the past is delivered at once); at most one of the two. Consumers get it no earlier than that."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    _: KW_ONLY
    delay_level: int = 0
    deliver_at_ms: int = 0

    def __post_init__(self) -> None:
        """Refuse, as the SDK's error, fields the SDK could not send (they failed deep in a send with a TypeError).
        ``delay_level`` and ``deliver_at_ms`` are checked when the message is encoded."""
        if self.properties is None:  # (as no properties: what a plain message with None sent before)
            self.properties = {}
        wrong = _wrong_field(self)
        if wrong:
            from client.errors import MQClientError  # here: the broker imports this module, not the SDK

            raise MQClientError(f"bad message: {wrong}")

    def key_list(self) -> list[str]:
        if not self.keys:
            return []
        return self.keys.split(KEY_SEPARATOR) if isinstance(self.keys, str) else list(self.keys)


_INT32 = range(-(2**31), 2**31)


def _wrong_field(msg: Message) -> str:
    """What is wrong with ``msg``'s fields' types, or ""."""
    if not isinstance(msg.topic, str):
        return f"topic must be a str, not {type(msg.topic).__name__}"
    if type(msg.body) is not bytes and not isinstance(msg.body, (bytes, bytearray, memoryview)):
        return f"body must be bytes, not {type(msg.body).__name__} (encode a str first)"
    if msg.tags is not None and not isinstance(msg.tags, str):
        return f"tags must be a str or None, not {type(msg.tags).__name__}"
    if msg.tags is not None and "||" in msg.tags:
        return (f"tags {msg.tags!r} hold '||', which separates a subscription's tags: no tag subscription could "
                "match it")
    keys = msg.keys
    if keys is not None and not isinstance(keys, str):
        if not isinstance(keys, (list, tuple, set, frozenset)):
            return f"keys must be a str or a list of str, not {type(keys).__name__}"
        for key in keys:
            if not isinstance(key, str):
                return f"keys must be strs, not {key!r}"
    properties = msg.properties
    if type(properties) is not dict and not isinstance(properties, Mapping):
        return f"properties must be a dict of str to str, not {type(properties).__name__}"
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            return f"properties must be a dict of str to str, not {name!r}: {value!r}"
    if not isinstance(msg.flag, int) or msg.flag not in _INT32:
        return f"flag must be a 32-bit integer, not {msg.flag!r}"
    return ""


@dataclass(slots=True)
class MessageExt:
    """A stored message as read back. Properties, hosts and the message id are decoded on first use:
    a consumer that reads only bodies never pays for them."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    born_timestamp: int
    raw_properties: bytes = b""
    raw_born_host: bytes = bytes(8)
    raw_store_host: bytes = bytes(8)
    flag: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    _properties: dict[str, str] | None = None
    receipt_handle: str = ""  # POP (SimpleConsumer): what acks this delivery (common/receipt_handle.py)

    @property
    def properties(self) -> dict[str, str]:
        if self._properties is None:
            self._properties = decode_properties(self.raw_properties)
        return self._properties

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return raw.split(KEY_SEPARATOR) if raw else []

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQUE_KEY)

    @property
    def born_host(self) -> str:
        return decode_host(self.raw_born_host)

    @property
    def store_host(self) -> str:
        return decode_host(self.raw_store_host)

    @property
    def msg_id(self) -> str:
        """The id RocketMQ users know: the unique key its producer gave it, else its offset id."""
        return self.unique_key or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        """Store host and commitlog offset: enough to find the record again."""
        return make_message_id(self.raw_store_host, self.physical_offset)
