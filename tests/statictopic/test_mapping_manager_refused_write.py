"""The mapping file is the source of truth: a change whose write the disk refused is not served either, so what
the broker answers is what a restart loads, and the operator's retry of the change is a change again (applied in
memory only, the retry saw it as applied: the reuse checks and the forgetting of stale state were skipped, and a
restart brought the old mapping back)."""

import errno
import os
from pathlib import Path

import pytest

from broker.metadata.json_file import MetadataFileError
from broker.statictopic import topic_queue_mapping_manager
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail

T = "MappedT"


def detail(epoch: int, gens: int) -> TopicQueueMappingDetail:
    chain = [LogicQueueMappingItem(gen=g, queue_id=g, bname="b", logic_offset=g * 10_000) for g in range(gens)]
    for earlier in chain[:-1]:
        earlier.end_offset = 10  # its physical queue's end: the next link took over there
    return TopicQueueMappingDetail(T, 1, "b", epoch, hosted_queues={0: chain})


def refuse_once(monkeypatch: pytest.MonkeyPatch) -> None:
    write = topic_queue_mapping_manager.write_json_atomically
    left = [1]

    def refusing(path: Path, data: object) -> None:
        if left[0]:
            left[0] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, data)

    monkeypatch.setattr(topic_queue_mapping_manager, "write_json_atomically", refusing)


def reloaded(tmp_path: Path) -> TopicQueueMappingManager:
    manager = TopicQueueMappingManager(tmp_path, "b")
    manager.load()
    return manager


def test_a_refused_update_keeps_the_old_detail_and_a_retry_applies_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    manager = TopicQueueMappingManager(tmp_path, "b")
    first, second = detail(1, 1), detail(2, 2)
    manager.update(first)
    refuse_once(monkeypatch)
    with pytest.raises(OSError):
        manager.update(second)
    assert manager.get(T) is first  # as the file says
    assert reloaded(tmp_path).get(T) == first
    manager.update(second)  # the retry: a change again
    assert manager.get(T) is second and reloaded(tmp_path).get(T) == second


def test_a_refused_first_update_and_a_refused_delete_change_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    manager = TopicQueueMappingManager(tmp_path, "b")
    refuse_once(monkeypatch)
    with pytest.raises(OSError):
        manager.update(detail(1, 1))
    assert manager.get(T) is None
    manager.update(detail(1, 1))
    refuse_once(monkeypatch)
    with pytest.raises(OSError):
        manager.delete(T)
    assert manager.get(T) == detail(1, 1) and reloaded(tmp_path).get(T) == detail(1, 1)
    assert manager.delete(T) and reloaded(tmp_path).get(T) is None


@pytest.mark.parametrize("text", ["{not json", '{"details": [{"topic": "T"}]}', '{"details": 3}'])
def test_a_mapping_file_that_does_not_load_is_named_with_why(tmp_path: Path, text: str):
    """(Damaged or hand-edited, it stopped the start with a JSONDecodeError or KeyError traceback.)"""
    (tmp_path / "topicQueueMapping.json").write_text(text)
    with pytest.raises(MetadataFileError, match=r"topicQueueMapping\.json cannot be loaded: "):
        TopicQueueMappingManager(tmp_path, "b").load()
