"""What one broker records about a static topic: the chains of the logic queues it hosts."""

from dataclasses import dataclass, field

from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem

MAPPING_SCOPE_GLOBAL = "__global__"


@dataclass(slots=True)
class TopicQueueMappingDetail:
    topic: str
    total_queues: int
    bname: str
    epoch: int
    scope: str = MAPPING_SCOPE_GLOBAL
    dirty: bool = False
    hosted_queues: dict[int, list[LogicQueueMappingItem]] = field(default_factory=dict)  # global id -> by gen

    def leader(self, global_id: int) -> LogicQueueMappingItem | None:
        """The last item of the chain, if this broker holds one for ``global_id``."""
        items = self.hosted_queues.get(global_id)
        return items[-1] if items else None

    def leads(self, global_id: int) -> bool:
        leader = self.leader(global_id)
        return leader is not None and leader.bname == self.bname

    def led_queues(self) -> dict[int, int]:
        """Global id -> physical queue id, for the logic queues this broker leads."""
        out = {}
        for global_id, items in self.hosted_queues.items():
            if items and items[-1].bname == self.bname:
                out[global_id] = items[-1].queue_id
        return out

    def copy(self) -> "TopicQueueMappingDetail":
        return TopicQueueMappingDetail(
            self.topic, self.total_queues, self.bname, self.epoch, self.scope, self.dirty,
            {gid: [LogicQueueMappingItem(**{f: getattr(i, f) for f in i.__slots__}) for i in items]
             for gid, items in self.hosted_queues.items()})
