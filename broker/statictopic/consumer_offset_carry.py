"""Carrying consumer offsets forward when the clean service drops a link of a chain.

A group's offset is stored on the link it falls in and read back newest link first. A group whose newest offset
is on a dropped link would read as "never committed", and a consumer starting from the last offset would skip
what came since. So before a link goes, every group with an offset on it and none on the next link gets one at the
next link's start: the same position (the dropped link holds nothing readable) in a link that stays.

The offsets on the next link must be on disk before the link goes (a crash between would leave the group with
none): this broker's are flushed first (JSON metadata keeps commits in memory until a timer). A peer's cannot be
flushed from here (its UpdateConsumerOffset may only reach its memory), so a link whose offsets were carried to a
peer goes at a later pass, once a fresh read finds them there (the peer's flush timer, far shorter than the clean
interval, has written them by then).

Offsets are read with one GetAllConsumerOffsets per broker per clean pass (a pass drops few links).
"""

import logging

from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.static_topic_service import StaticTopicService
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import common_pb2

log = logging.getLogger(__name__)

QueueOffsets = dict[tuple[str, int], dict[str, int]]  # (topic, physical queue) -> group -> offset


class ConsumerOffsetCarry:
    """One clean pass: offsets per broker are read once and kept until :meth:`reset`."""

    def __init__(self, static_topics: StaticTopicService) -> None:
        self.static_topics = static_topics
        self._offsets: dict[str, QueueOffsets] = {}
        self._carried_to_peers: set[tuple[str, str, int, str]] = set()  # (broker, topic, queue, group), this pass

    def reset(self) -> None:
        self._offsets.clear()
        self._carried_to_peers.clear()

    def _offsets_on(self, bname: str) -> QueueOffsets:
        if bname not in self._offsets:
            if bname == self.static_topics.broker_name:
                records = self.static_topics.consumer_offset_manager.all_offsets()
            else:
                answer = self.static_topics.peer_brokers.call(bname, "GetAllConsumerOffsets", common_pb2.Empty())
                records = [(e.group, e.topic, e.queue_id, e.offset) for e in answer.offsets]
            table: QueueOffsets = {}
            for group, topic, queue_id, offset in records:
                table.setdefault((topic, queue_id), {})[group] = offset
            self._offsets[bname] = table
        return self._offsets[bname]

    def carry(self, topic: str, gone: LogicQueueMappingItem, successor: LogicQueueMappingItem) -> bool:
        """Give each group with an offset on ``gone`` and none on ``successor`` one at ``successor``'s start.
        False when an offset could not be read or written, or is not known to be on disk yet (then ``gone`` must
        stay for now)."""
        local = successor.bname == self.static_topics.broker_name
        try:
            groups = self._offsets_on(gone.bname).get((topic, gone.queue_id), {})
            kept = self._offsets_on(successor.bname).setdefault((topic, successor.queue_id), {})
            for group in sorted(set(groups) - set(kept)):
                self.static_topics.commit_physical(topic, successor, group, successor.start_offset)
                kept[group] = successor.start_offset
                if not local:
                    self._carried_to_peers.add((successor.bname, topic, successor.queue_id, group))
                log.info("static_offset_carried topic=%s group=%s from=%s/%d to=%s/%d offset=%d", topic, group,
                         gone.bname, gone.queue_id, successor.bname, successor.queue_id, successor.start_offset)
            if local and groups:
                self.static_topics.consumer_offset_manager.persist()  # carried or committed: on disk before it goes
        except (PeerBrokerError, OSError) as exc:
            log.warning("static_offset_carry_failed topic=%s from=%s reason=%s", topic, gone.bname, exc)
            return False
        waiting = sorted(g for g in groups if (successor.bname, topic, successor.queue_id, g) in self._carried_to_peers)
        if waiting:
            log.info("static_offset_carry_pending topic=%s groups=%s to=%s/%d action='the link goes at a later "
                     "pass, the offsets on the peer's disk by then'", topic, ",".join(waiting), successor.bname,
                     successor.queue_id)
            return False
        return True
