"""A request on one logic queue of a static topic, as the leader broker sees it."""

from dataclasses import dataclass, field

from common.refusal import Refusal
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail


class NotLeaderError(Refusal):
    """This broker does not lead the logic queue: answered NOT_LEADER_FOR_QUEUE (501); the client refreshes its
    route and asks the leader."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.NOT_LEADER_FOR_QUEUE, remark)


@dataclass(slots=True)
class LogicQueueContext:
    detail: TopicQueueMappingDetail
    global_id: int
    chain: list[LogicQueueMappingItem]  # oldest first; the last is the leader
    decided: list[LogicQueueMappingItem] = field(init=False)  # items whose logic offset is known, oldest first

    def __post_init__(self) -> None:
        self.decided = [i for i in self.chain if i.logic_offset_decided()]

    @property
    def topic(self) -> str:
        return self.detail.topic

    @property
    def leader(self) -> LogicQueueMappingItem:
        return self.chain[-1]

    def item_for(self, logic_offset: int) -> LogicQueueMappingItem | None:
        """The last decided item starting at or before ``logic_offset``; None if it is before them all."""
        found = None
        for item in self.chain:
            if item.logic_offset_decided() and item.logic_offset <= logic_offset:
                found = item
        return found

    def after(self, item: LogicQueueMappingItem) -> LogicQueueMappingItem | None:
        i = self.chain.index(item)
        return self.chain[i + 1] if i + 1 < len(self.chain) else None
