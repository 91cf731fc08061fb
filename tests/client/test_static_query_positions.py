"""Query results of static topics in logic terms: which link of which chain covers a physical position."""

from client.static_query_positions import logic_position, to_logic_positions
from common.message import MessageExt
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail

# logic queue 0: a/q0 [0, 7) -> b/q2 [0, 5) at 10000 -> back on a/q0 from physical 7, at 20000 (open)
CHAIN = [
    LogicQueueMappingItem(gen=0, queue_id=0, bname="a", logic_offset=0, start_offset=0, end_offset=7),
    LogicQueueMappingItem(gen=1, queue_id=2, bname="b", logic_offset=10_000, start_offset=0, end_offset=5),
    LogicQueueMappingItem(gen=2, queue_id=0, bname="a", logic_offset=20_000, start_offset=7),
]
# logic queue 1: led by b, its new link not decided yet
UNDECIDED = [LogicQueueMappingItem(gen=0, queue_id=1, bname="b", logic_offset=-1, start_offset=0)]
DETAILS = [TopicQueueMappingDetail("T", 2, "a", 3, hosted_queues={0: CHAIN, 1: UNDECIDED})]


def test_each_link_maps_its_own_physical_range():
    assert logic_position(DETAILS, "a", 0, 0) == (0, 0)
    assert logic_position(DETAILS, "a", 0, 6) == (0, 6)
    assert logic_position(DETAILS, "b", 2, 4) == (0, 10_004)
    # the same physical queue again, past the first link's end: the third link
    assert logic_position(DETAILS, "a", 0, 7) == (0, 20_000)
    assert logic_position(DETAILS, "a", 0, 50) == (0, 20_043)


def test_unknown_or_undecided_positions_stay_physical():
    assert logic_position(DETAILS, "b", 2, 5) is None  # past a closed link's end
    assert logic_position(DETAILS, "c", 0, 0) is None
    assert logic_position(DETAILS, "b", 1, 0) is None  # the leader's start is not decided
    assert logic_position([], "a", 0, 0) is None  # a normal topic
    msg = MessageExt("T", b"x", queue_id=1, queue_offset=0, physical_offset=0, store_timestamp=0, born_timestamp=0)
    assert to_logic_positions([msg], "b", DETAILS)[0].queue_offset == 0
    moved = MessageExt("T", b"y", queue_id=2, queue_offset=3, physical_offset=0, store_timestamp=0, born_timestamp=0)
    (m,) = to_logic_positions([moved], "b", DETAILS)
    assert (m.queue_id, m.queue_offset) == (0, 10_003)
