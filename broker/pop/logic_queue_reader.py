"""Reading a static topic's logic queue for POP: the same reads a logic-queue pull makes (the leader's item here,
older items on their brokers), answered as the store answers a physical queue, with each record's queue id and
queue offset rewritten to the logic queue's (the CRC covers neither). POP's state for a static topic is kept in
logic offsets on the leader, so it follows the logic queue, not the physical one."""

import struct

from broker.processor.pull_outcome import DEFAULT_MAX_BYTES
from broker.statictopic.logic_queue_context import LogicQueueContext
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.get_message_result import GetMessageResult, GetMessageStatus
from common.response_code import ResponseCode
from common.wire_batch import OFFSET_QUEUE_ID, OFFSET_QUEUE_OFFSET
from proto import broker_pb2

MAX_HOPS = 8  # drained older items followed within one read
SIZE = struct.Struct(">i")
QUEUE_ID = struct.Struct(">i")
QUEUE_OFFSET = struct.Struct(">q")


class LogicQueueReader:
    """``get_message`` over the logic queues this broker leads (``contexts``: logic queue id -> its context)."""

    def __init__(self, static_topics: StaticTopicService, contexts: dict[int, LogicQueueContext], group: str) -> None:
        self.static_topics = static_topics
        self.contexts = contexts
        self.group = group  # older items' brokers are pulled from in the group's name

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = DEFAULT_MAX_BYTES, tags_codes: set[int] | None = None) -> GetMessageResult:
        ctx = self.contexts[queue_id]
        codes = frozenset(tags_codes) if tags_codes is not None else None
        request = broker_pb2.PullMessageRequest(consumer_group=self.group, topic=topic, queue_id=queue_id,
                                                max_msg_nums=max_msg_nums, max_bytes=max_total_bytes,
                                                addressing=broker_pb2.LOGIC)
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        moved = False  # past records filtered out (or an older item drained): the scan may go on from there
        min_offset = offset
        for _ in range(MAX_HOPS):
            request.queue_offset = offset
            response = self.static_topics.pull(ctx, request, codes).full_response()
            code = response.code
            min_offset = response.min_offset
            if code == ResponseCode.SUCCESS:
                records = _to_logic(response.records, queue_id, response.offset_delta)
                return GetMessageResult(GetMessageStatus.FOUND, response.next_begin_offset, response.min_offset,
                                        response.max_offset, records, sum(map(len, records)))
            if code == ResponseCode.PULL_NOT_FOUND:
                # At the end: after a hop past filtered records, that is NO_MATCHED_MESSAGE, so the scan moves past
                # them (as the store answers a physical queue); said as the end, the group's offset stayed before
                # them for good and each long poll woke at once, spinning a core (the POP-static review)
                status = GetMessageStatus.NO_MATCHED_MESSAGE if moved else GetMessageStatus.OFFSET_OVERFLOW_ONE
                break
            if code == ResponseCode.PULL_OFFSET_MOVED:
                status = GetMessageStatus.OFFSET_TOO_SMALL
                offset = response.next_begin_offset
                break
            if code != ResponseCode.PULL_RETRY_IMMEDIATELY:  # a peer broker's failure: nothing read now
                status = GetMessageStatus.OFFSET_OVERFLOW_ONE
                break
            offset = response.next_begin_offset  # an older item drained, or everything filtered out
            moved = True
        # (the pull's min offset: the logic queue's own, asked of the earliest link's broker, failed every empty read
        # while that broker was down)
        return GetMessageResult(status, offset, min_offset, offset)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.static_topics.min_offset(self.contexts[queue_id])


def _to_logic(records: bytes, queue_id: int, offset_delta: int) -> list[bytes]:
    """Each record separately, with the logic queue id and the logic queue offset written in."""
    out: list[bytes] = []
    pos = 0
    while pos < len(records):
        size = SIZE.unpack_from(records, pos)[0]
        record = bytearray(records[pos:pos + size])
        QUEUE_ID.pack_into(record, OFFSET_QUEUE_ID, queue_id)
        QUEUE_OFFSET.pack_into(record, OFFSET_QUEUE_OFFSET,
                               QUEUE_OFFSET.unpack_from(record, OFFSET_QUEUE_OFFSET)[0] + offset_delta)
        out.append(bytes(record))
        pos += size
    return out
