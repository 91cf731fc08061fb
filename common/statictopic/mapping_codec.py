"""Mapping details to and from protobuf (the wire) and plain dicts (the broker's mapping file)."""

import dataclasses
from typing import Any

from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import common_pb2

_ITEM_FIELDS = [f.name for f in dataclasses.fields(LogicQueueMappingItem)]


def detail_to_proto(d: TopicQueueMappingDetail) -> common_pb2.TopicQueueMappingDetail:
    p = common_pb2.TopicQueueMappingDetail(topic=d.topic, scope=d.scope, total_queues=d.total_queues, bname=d.bname,
                                           epoch=d.epoch, dirty=d.dirty)
    for global_id, items in d.hosted_queues.items():
        p.hosted_queues[global_id].items.extend(
            common_pb2.LogicQueueMappingItem(**{f: getattr(i, f) for f in _ITEM_FIELDS}) for i in items)
    return p


def detail_from_proto(p: common_pb2.TopicQueueMappingDetail) -> TopicQueueMappingDetail:
    return TopicQueueMappingDetail(
        p.topic, p.total_queues, p.bname, p.epoch, p.scope, p.dirty,
        {gid: [LogicQueueMappingItem(**{f: getattr(i, f) for f in _ITEM_FIELDS}) for i in chain.items]
         for gid, chain in sorted(p.hosted_queues.items())})


def detail_to_dict(d: TopicQueueMappingDetail) -> dict[str, Any]:
    out = dataclasses.asdict(d)
    out["hosted_queues"] = {str(gid): items for gid, items in out["hosted_queues"].items()}
    return out


def detail_from_dict(raw: dict[str, Any]) -> TopicQueueMappingDetail:
    hosted = {int(gid): [LogicQueueMappingItem(**item) for item in items]
              for gid, items in raw.get("hosted_queues", {}).items()}
    return TopicQueueMappingDetail(raw["topic"], raw["total_queues"], raw["bname"], raw["epoch"], raw["scope"],
                                   raw.get("dirty", False), hosted)


def detail_to_info(d: TopicQueueMappingDetail) -> common_pb2.TopicQueueMappingInfo:
    """What the broker registers with the name server: totals and the queues it leads."""
    return common_pb2.TopicQueueMappingInfo(topic=d.topic, scope=d.scope, total_queues=d.total_queues, bname=d.bname,
                                            epoch=d.epoch, dirty=d.dirty, curr_id_map=d.led_queues())
