"""Message properties: RocketMQ's wire form ``name\\x01value\\x02...`` and the reserved names.

The store parses only what dispatch needs (tags, keys, unique key) with ``bytes.find``,
so no dict is built per message on the hot path.
"""

import zlib
from collections.abc import Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQUE_KEY = "UNIQ_KEY"
# Static topics: the SDK reads logic offsets back from these (set by the broker on pull).
PROPERTY_STATIC_LOGIC_QUEUE = "__LOGIC_QUEUE"

MAX_PROPERTIES_SIZE = 32767

_B_NAME_VALUE = NAME_VALUE_SEPARATOR.encode()
_B_PROPERTY = PROPERTY_SEPARATOR.encode()


def encode_properties(properties: Mapping[str, str]) -> bytes:
    for name, value in properties.items():
        if not name or any(sep in name or sep in value for sep in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)):
            raise ValueError(f"property {name!r} has an empty name or a reserved separator character")
    return "".join(f"{n}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for n, v in properties.items()).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in raw.decode().split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
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


def tags_code(tags: bytes | str | None) -> int:
    """Hash of a tag stored in the consume queue; 0 means "no tag". Stable across processes."""
    if not tags:
        return 0
    if isinstance(tags, str):
        tags = tags.encode()
    return zlib.crc32(tags) or 1
