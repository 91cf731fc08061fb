"""A logic pull past the latest item's max is moved back to it (OFFSET_MOVED), as a normal topic's is. It was
answered PULL_NOT_FOUND at the same offset: after a failover to a master that was behind, or a crash that lost the
unflushed tail while the consumer offset survived, the consumer waited there and skipped every message written
below it."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.processor.pull_outcome import to_response
from broker.statictopic.logic_queue_context import LogicQueueContext
from broker.statictopic.static_topic_service import StaticTopicService
from broker.store.message_store import MessageStore
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import broker_pb2
from tests.store.conftest import store_config

STATIC, PLAIN = "PastMaxT", "PastMaxPlainT"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(store_config(tmp_path / "store"))
    s.start()
    try:
        yield s
    finally:
        s.shutdown()


def put(store: MessageStore, topic: str, queue_id: int, n: int) -> None:
    assert store.put_messages(topic, queue_id, [b"m"] * n, [b""] * n).ok
    assert store.wait_dispatched(store.commit_log.max_offset())


def chain_ctx(items: list[LogicQueueMappingItem]) -> LogicQueueContext:
    detail = TopicQueueMappingDetail(STATIC, 1, "broker-a", 1, hosted_queues={0: items})
    return LogicQueueContext(detail, 0, items)


def logic_pull(store: MessageStore, ctx: LogicQueueContext, offset: int) -> broker_pb2.PullMessageResponse:
    service = StaticTopicService("broker-a", None, None, store, None)  # type: ignore[arg-type]
    request = broker_pb2.PullMessageRequest(topic=STATIC, queue_id=0, queue_offset=offset, max_msg_nums=32,
                                            addressing=broker_pb2.LOGIC)
    return service.pull(ctx, request, None).response


def test_a_pull_past_the_leader_s_max_is_moved_to_it_as_on_a_normal_topic(store: MessageStore) -> None:
    put(store, STATIC, 0, 3)
    put(store, PLAIN, 0, 3)
    plain = to_response(store.get_message(PLAIN, 0, 50, 32), 50)  # what a normal topic answers
    assert (plain.code, plain.next_begin_offset) == (ResponseCode.PULL_OFFSET_MOVED, 3)
    r = logic_pull(store, chain_ctx([LogicQueueMappingItem(gen=0, queue_id=0, bname="broker-a", logic_offset=0)]), 50)
    assert (r.code, r.next_begin_offset, r.max_offset) == (ResponseCode.PULL_OFFSET_MOVED, 3, 3)


def test_past_the_max_of_a_later_link_moves_to_that_link_s_max_in_logic_terms(store: MessageStore) -> None:
    put(store, STATIC, 0, 4)  # the closed link: logic 0..3
    put(store, STATIC, 1, 2)  # the leader's link: logic 10000..10001
    ctx = chain_ctx([LogicQueueMappingItem(gen=0, queue_id=0, bname="broker-a", logic_offset=0, end_offset=4),
                     LogicQueueMappingItem(gen=1, queue_id=1, bname="broker-a", logic_offset=10_000)])
    r = logic_pull(store, ctx, 10_050)
    assert (r.code, r.next_begin_offset) == (ResponseCode.PULL_OFFSET_MOVED, 10_002)
    r = logic_pull(store, ctx, 10_002)  # at the max: caught up, parked as before
    assert (r.code, r.next_begin_offset) == (ResponseCode.PULL_NOT_FOUND, 10_002)
    r = logic_pull(store, ctx, 4)  # the drained older link still hops to the next one, never resets
    assert (r.code, r.next_begin_offset) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 10_000)


class OlderLinkBroker:
    """broker-x, holding an older link (end 10) of which it has dispatched 8: what a pull and GetMaxOffset (the
    appended count, what the end was decided from) answer. ``appended``: 10 while dispatch lags, 8 once it lost
    its tail in a crash."""

    def __init__(self, appended: int) -> None:
        self.appended = appended

    def call(self, bname: str, method: str, request: object) -> object:
        assert bname == "broker-x"
        if method == "PullMessage":
            return broker_pb2.PullMessageResponse(code=ResponseCode.PULL_NOT_FOUND, min_offset=0, max_offset=8,
                                                  next_begin_offset=8)
        assert method == "GetMaxOffset"
        return broker_pb2.OffsetResponse(code=ResponseCode.SUCCESS, offset=self.appended)


@pytest.mark.parametrize("appended, expected", [(10, (ResponseCode.PULL_NOT_FOUND, 8)),
                                                (8, (ResponseCode.PULL_RETRY_IMMEDIATELY, 10_000))])
def test_an_older_link_not_dispatched_to_its_end_is_waited_for_not_hopped_past(
        store: MessageStore, appended: int, expected: tuple[int, int]) -> None:
    """A reader at the dispatched max of an older link below its decided end hopped to the next link: the two
    messages appended (counted in the end) but not yet dispatched were skipped for good. It waits now; a link whose
    broker lost them (a crash before a flush) is still left, since they will not come."""
    ctx = chain_ctx([LogicQueueMappingItem(gen=0, queue_id=0, bname="broker-x", logic_offset=0, end_offset=10),
                     LogicQueueMappingItem(gen=1, queue_id=0, bname="broker-a", logic_offset=10_000)])
    service = StaticTopicService("broker-a", None, None, store, OlderLinkBroker(appended))  # type: ignore[arg-type]
    request = broker_pb2.PullMessageRequest(topic=STATIC, queue_id=0, queue_offset=8, max_msg_nums=32,
                                            addressing=broker_pb2.LOGIC)
    outcome = service.pull(ctx, request, None)
    assert (outcome.response.code, outcome.response.next_begin_offset) == expected
    if expected[0] == ResponseCode.PULL_NOT_FOUND:  # asked again in a moment: not answered at once to a re-pull loop
        assert outcome.hold is None and outcome.retry_after_s > 0
