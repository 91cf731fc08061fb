"""A deleteTopic is a record in the commitlog: every dispatcher forgets the topic when dispatch reaches it.

So the deletion happens at one place in the log, the same for everyone who dispatches it: the master, a replay
after a crash (which may start below it: the topic's old records make its queues again, and this record drops them
again before the records of a topic made again under the name, which start at queue offset 0), and a slave
dispatching the copied log. Reput hands such a record to no dispatcher as a request; it calls
``CommitLogDispatcher.topic_deleted`` instead (``reput_service.py``).

The record is in a system topic (``rmq_sys_*``: producers cannot send to it), queue 0, with the deleted topic's name
in a property and an empty body."""

from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, PROPERTIES, DispatchRequest
from common.message_properties import encode_properties, find_property
from common.wire_batch import WireBatch

TOPIC_DELETION_TOPIC = "rmq_sys_topic_deleted"
PROPERTY_DELETED_TOPIC = "DELETED_TOPIC"
_NEEDLE = PROPERTY_DELETED_TOPIC.encode() + b"\x01"


def topic_deletion_batch(topic: str, born_timestamp: int, store_host: bytes) -> WireBatch:
    return WireBatch.of(TOPIC_DELETION_TOPIC.encode(), 0, [b""], [encode_properties({PROPERTY_DELETED_TOPIC: topic})],
                        born_timestamp=born_timestamp, born_host=store_host, store_host=store_host)


def deleted_topic(request: DispatchRequest) -> str:
    """The topic a deletion record (a request of :data:`TOPIC_DELETION_TOPIC`) deletes."""
    name = find_property(request[PROPERTIES], _NEEDLE)
    assert name, f"a topic deletion record without its topic at commitlog offset {request[PHYSICAL_OFFSET]}"
    return name.decode()
