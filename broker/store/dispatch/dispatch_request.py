"""What the reput service hands to dispatchers for each commitlog record.

A plain tuple (six times cheaper to build than a NamedTuple on this hot path); unpack it as::

    for topic, queue_id, queue_offset, physical_offset, size, tags_code, store_timestamp, properties in requests:

``properties`` is the raw wire form; a dispatcher finds what it needs (keys, unique key, KV op) itself.
"""

from typing import Final

DispatchRequest = tuple[str, int, int, int, int, int, int, bytes]

# The fields' positions, Final so a type checker knows each field's type where a request is indexed.
TOPIC: Final = 0
QUEUE_ID: Final = 1
QUEUE_OFFSET: Final = 2
PHYSICAL_OFFSET: Final = 3
SIZE: Final = 4
TAGS_CODE: Final = 5
STORE_TIMESTAMP: Final = 6
PROPERTIES: Final = 7
