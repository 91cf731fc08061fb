"""What the reput service hands to dispatchers for each commitlog record.

A plain tuple (six times cheaper to build than a NamedTuple on this hot path); unpack it as::

    for topic, queue_id, queue_offset, physical_offset, size, tags_code, store_timestamp, properties in requests:

``properties`` is the raw wire form; a dispatcher finds what it needs (keys, unique key, KV op) itself.
"""

DispatchRequest = tuple[str, int, int, int, int, int, int, bytes]

TOPIC, QUEUE_ID, QUEUE_OFFSET, PHYSICAL_OFFSET, SIZE, TAGS_CODE, STORE_TIMESTAMP, PROPERTIES = range(8)
