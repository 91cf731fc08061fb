"""Messages as users see them: what a producer sends and what a consumer receives."""

from dataclasses import dataclass, field

from common.message_properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQUE_KEY,
)


@dataclass(slots=True)
class Message:
    """A message to send. ``keys`` are indexed for query-by-key; ``tags`` filter on the broker."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    def key_list(self) -> list[str]:
        if not self.keys:
            return []
        return self.keys.split(KEY_SEPARATOR) if isinstance(self.keys, str) else list(self.keys)

    def all_properties(self) -> dict[str, str]:
        """User properties plus the reserved ones the store indexes (tags, keys)."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = self.key_list()
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        return props


@dataclass(slots=True)
class MessageExt:
    """A stored message as read back: the record's fields with properties decoded."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    born_timestamp: int
    born_host: str
    store_host: str
    msg_id: str
    flag: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0

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
