"""Mapping details over the wire (protobuf) and in the broker's mapping file (dicts/JSON), and the per-broker
info registered with the name server."""

import json

from hypothesis import given
from hypothesis import strategies as st

from common.statictopic.logic_queue_mapping_item import NOT_DECIDED, LogicQueueMappingItem
from common.statictopic.mapping_codec import (
    detail_from_dict,
    detail_from_proto,
    detail_to_dict,
    detail_to_info,
    detail_to_proto,
)
from common.statictopic.topic_queue_mapping_detail import MAPPING_SCOPE_GLOBAL, TopicQueueMappingDetail
from proto import common_pb2

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
bnames = st.sampled_from(["b0", "b1", "b2", "broker-a", "ü"])

items = st.builds(LogicQueueMappingItem, gen=INT32, queue_id=INT32, bname=bnames, logic_offset=INT64,
                  start_offset=INT64, end_offset=INT64, time_of_start=INT64, time_of_end=INT64)


@st.composite
def details(draw) -> TopicQueueMappingDetail:
    total = draw(st.integers(1, 64))
    hosted = draw(st.dictionaries(st.integers(0, total - 1), st.lists(items, min_size=1, max_size=4), max_size=8))
    return TopicQueueMappingDetail(draw(names), total, draw(bnames), draw(INT64),
                                   draw(st.one_of(st.just(MAPPING_SCOPE_GLOBAL), names)), draw(st.booleans()), hosted)


@given(details())
def test_proto_round_trip(d):
    assert detail_from_proto(detail_to_proto(d)) == d
    wire = detail_to_proto(d).SerializeToString()
    assert detail_from_proto(common_pb2.TopicQueueMappingDetail.FromString(wire)) == d


@given(details())
def test_dict_round_trip(d):
    assert detail_from_dict(detail_to_dict(d)) == d
    assert detail_from_dict(json.loads(json.dumps(detail_to_dict(d)))) == d  # what the mapping file holds


@given(details())
def test_round_trips_do_not_share_state(d):
    back = detail_from_dict(detail_to_dict(d))
    for chain in back.hosted_queues.values():
        chain[0].gen += 1
        chain.append(chain[0])
    assert detail_from_dict(detail_to_dict(d)) == d
    assert detail_from_proto(detail_to_proto(d)) == d


@given(details())
def test_copy_is_equal_and_independent(d):
    c = d.copy()
    assert c == d
    for chain in c.hosted_queues.values():
        chain[-1].logic_offset += 1
    assert all(c.hosted_queues[g][-1].logic_offset == d.hosted_queues[g][-1].logic_offset + 1 for g in d.hosted_queues)


def test_dict_layout_is_plain_json():
    d = TopicQueueMappingDetail("T", 3, "b0", 42, hosted_queues={
        2: [LogicQueueMappingItem(0, 1, "b1", 0, 0, 55, 7, 9), LogicQueueMappingItem(1, 0, "b0", 10_000)]})
    raw = detail_to_dict(d)
    assert raw == {
        "topic": "T", "total_queues": 3, "bname": "b0", "epoch": 42, "scope": MAPPING_SCOPE_GLOBAL, "dirty": False,
        "hosted_queues": {"2": [
            {"gen": 0, "queue_id": 1, "bname": "b1", "logic_offset": 0, "start_offset": 0, "end_offset": 55,
             "time_of_start": 7, "time_of_end": 9},
            {"gen": 1, "queue_id": 0, "bname": "b0", "logic_offset": 10_000, "start_offset": 0,
             "end_offset": NOT_DECIDED, "time_of_start": NOT_DECIDED, "time_of_end": NOT_DECIDED}]}}
    del raw["dirty"]
    assert detail_from_dict(raw) == d  # "dirty" is optional in a file


def test_proto_fields():
    d = TopicQueueMappingDetail("T", 3, "b0", 2**40, "s", True, {1: [LogicQueueMappingItem(4, 2, "b1", -1, 0, -1)]})
    p = detail_to_proto(d)
    assert (p.topic, p.total_queues, p.bname, p.epoch, p.scope, p.dirty) == ("T", 3, "b0", 2**40, "s", True)
    [item] = p.hosted_queues[1].items
    assert (item.gen, item.queue_id, item.bname, item.logic_offset, item.end_offset) == (4, 2, "b1", -1, -1)


def test_info_maps_only_the_queues_this_broker_leads():
    d = TopicQueueMappingDetail("T", 4, "b1", 77, hosted_queues={
        0: [LogicQueueMappingItem(0, 0, "b1")],
        1: [LogicQueueMappingItem(0, 3, "b0", 0, 0, 9), LogicQueueMappingItem(1, 5, "b1", 10_000)],  # gained
        2: [LogicQueueMappingItem(0, 1, "b1", 0, 0, 9), LogicQueueMappingItem(1, 2, "b2", 10_000)],  # lost
        3: [LogicQueueMappingItem(0, 4, "b1", 0, 0, 9), LogicQueueMappingItem(1, 6, "b3", NOT_DECIDED)],  # fenced
    })
    info = detail_to_info(d)
    assert dict(info.curr_id_map) == {0: 0, 1: 5}
    assert (info.topic, info.scope, info.total_queues, info.bname, info.epoch, info.dirty) == \
        ("T", MAPPING_SCOPE_GLOBAL, 4, "b1", 77, False)


def test_info_of_a_no_target_broker_is_empty_but_carries_epoch_and_total():
    info = detail_to_info(TopicQueueMappingDetail("T", 8, "b2", 123))
    assert dict(info.curr_id_map) == {} and (info.total_queues, info.epoch, info.bname) == (8, 123, "b2")


@given(details())
def test_info_matches_the_leaders(d):
    info = detail_to_info(d)
    expected = {g: chain[-1].queue_id for g, chain in d.hosted_queues.items() if chain[-1].bname == d.bname}
    assert dict(info.curr_id_map) == expected
    assert all(d.leads(g) for g in info.curr_id_map)
    assert not any(d.leads(g) for g in set(d.hosted_queues) - set(info.curr_id_map))
