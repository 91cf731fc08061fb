"""This broker's static-topic mappings, in a file of their own (``config/topicQueueMapping.json``).

The file is the source of truth: it is written before the topic config. A detail whose ``bname`` is not
this broker's is refused at load (a copied file must not become truth) and on update.
"""

import logging
import threading
from pathlib import Path

from broker.metadata.data_version import DataVersion
from broker.metadata.json_file import loading, read_json, write_json_atomically
from common.statictopic.mapping_checks import MappingError, check_update
from common.statictopic.mapping_codec import detail_from_dict, detail_to_dict, detail_to_info
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from proto import common_pb2

log = logging.getLogger(__name__)


class TopicQueueMappingManager:
    def __init__(self, config_dir: Path, bname: str) -> None:
        self.path = config_dir / "topicQueueMapping.json"
        self.bname = bname
        self.mapping_table: dict[str, TopicQueueMappingDetail] = {}
        self.data_version = DataVersion()  # bumped by every change: a slave's watch (WaitMetadataChange) sees it
        self._lock = threading.Lock()

    def load(self) -> None:
        with loading(self.path):  # damaged, or a hand edit
            details = [detail_from_dict(raw) for raw in (read_json(self.path) or {}).get("details", [])]
        for detail in details:
            if detail.bname != self.bname:
                raise MappingError(f"{self.path} holds the mapping of topic {detail.topic} for broker {detail.bname}, "
                                   f"but this broker is {self.bname}: refusing a copied mapping file")
            self.mapping_table[detail.topic] = detail
        if self.mapping_table:
            log.info("static_topic_mappings_loaded topics=%d", len(self.mapping_table))

    def _persist(self) -> None:
        write_json_atomically(self.path, {"details": [detail_to_dict(d) for d in self.mapping_table.values()]})

    def _store(self, topic: str, detail: TopicQueueMappingDetail | None) -> None:
        """Set (None: drop) ``topic``'s detail and write the file; a refused write leaves the table as it was, so
        what the broker serves is what a restart loads, and a retry of the change is a change again."""
        before = self.mapping_table.get(topic)
        if detail is None:
            del self.mapping_table[topic]
        else:
            self.mapping_table[topic] = detail
        try:
            self._persist()
        except BaseException:
            if before is None:
                self.mapping_table.pop(topic, None)
            else:
                self.mapping_table[topic] = before
            raise
        self.data_version.next()

    def get(self, topic: str) -> TopicQueueMappingDetail | None:
        return self.mapping_table.get(topic)

    def update(self, detail: TopicQueueMappingDetail, expected_epoch: int | None = None) -> None:
        """Apply this broker's new detail after the checks (epochs never decrease, no leader change at an
        equal epoch, well-formed chains, no link this broker holds dropped or forked, and, given
        ``expected_epoch``, still the detail the admin planned from); raises MappingError naming the rule."""
        self.check_owner(detail)
        with self._lock:  # the compare and the set under one lock: two admins cannot both pass the check
            held = self.mapping_table.get(detail.topic)
            check_update(held, detail, expected_epoch)
            assert held is None or detail.epoch >= held.epoch, "epochs never decrease"
            self._store(detail.topic, detail)
        log.info("static_topic_mapping_updated topic=%s epoch=%d total=%d leads=%s", detail.topic, detail.epoch,
                 detail.total_queues, sorted(detail.led_queues()))

    def check_owner(self, detail: TopicQueueMappingDetail) -> None:
        """MappingError unless ``detail`` is this broker's."""
        if detail.bname != self.bname:
            raise MappingError(f"broker {self.bname}: refusing the detail of broker {detail.bname} "
                               f"for topic {detail.topic}")

    def replace(self, detail: TopicQueueMappingDetail, expected: TopicQueueMappingDetail | None = None) -> bool:
        """Store a detail copied from the master (a slave), or one the broker trimmed (clean service: same epoch
        and leaders, fewer items) from ``expected``, only if that is still the one held: an update applied while
        the trim ran wins (the next pass trims it). Whether it was stored."""
        with self._lock:
            if expected is not None and self.mapping_table.get(detail.topic) is not expected:
                log.info("static_trim_skipped topic=%s reason=updated_meanwhile", detail.topic)
                return False
            self._store(detail.topic, detail)
        return True

    def delete(self, topic: str) -> bool:
        with self._lock:
            if topic not in self.mapping_table:
                return False
            self._store(topic, None)
        log.info("static_topic_mapping_deleted topic=%s", topic)
        return True

    def infos(self) -> dict[str, common_pb2.TopicQueueMappingInfo]:
        """Per static topic, what the name server needs: the total and the queues this broker leads."""
        return {topic: detail_to_info(d) for topic, d in list(self.mapping_table.items())}
