"""Static topics in query results: a message found by key or by id comes from a physical queue of one broker;
users see it in logic terms (the logic queue and logic offset a pull hands out), found through the chains."""

from collections.abc import Iterable

from common.message import MessageExt
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail


def logic_position(details: Iterable[TopicQueueMappingDetail], broker_name: str, queue_id: int,
                   queue_offset: int) -> tuple[int, int] | None:
    """(logic queue, logic offset) of physical ``queue_offset`` of ``queue_id`` on ``broker_name``; None when no
    decided link covers it (a link dropped by the clean service, or a new leader's start not decided yet)."""
    for detail in details:
        for logic_id, items in detail.hosted_queues.items():
            for item in items:
                if (item.bname == broker_name and item.queue_id == queue_id and item.logic_offset_decided()
                        and item.start_offset <= queue_offset
                        and (not item.end_offset_decided() or queue_offset < item.end_offset)):
                    return logic_id, item.logic_strictly(queue_offset)
    return None


def to_logic_positions(messages: list[MessageExt], broker_name: str,
                       details: list[TopicQueueMappingDetail]) -> list[MessageExt]:
    """``messages`` read from ``broker_name``, their queue id and offset rewritten to logic terms where a link
    covers them (in place; returned for chaining)."""
    for msg in messages:
        position = logic_position(details, broker_name, msg.queue_id, msg.queue_offset)
        if position is not None:
            msg.queue_id, msg.queue_offset = position
    return messages
