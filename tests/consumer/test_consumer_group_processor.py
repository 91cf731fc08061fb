"""A consumer session through the broker's processor (``broker/processor/consumer_group_processor.py``), in this
process over JSON metadata in a temp dir: what a heartbeat creates and where, how many groups it may name, and the
notices a client that does not read is owed."""

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from broker.client.consumer_manager import ConsumerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.metadata_codec import GROUPS, TOPICS
from broker.metadata.metadata_store import JsonMetadataStore
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor import consumer_group_processor
from broker.processor.consumer_group_processor import ConsumerGroupProcessor
from common.group_topics import retry_topic
from common.request_error import RequestError
from proto import consumer_pb2


class RecordingStore(JsonMetadataStore):
    """The JSON store, recording each write's size and thread."""

    def __init__(self, config_dir: Path, table) -> None:
        super().__init__(config_dir, table)
        self.puts: list[tuple[int, int]] = []  # (values, thread ident)

    def put(self, values) -> None:
        self.puts.append((len(values), threading.get_ident()))
        super().put(values)


def processor(tmp_path: Path, takes_writes: bool = True) -> ConsumerGroupProcessor:
    topics = TopicConfigManager(RecordingStore(tmp_path, TOPICS))
    groups = SubscriptionGroupManager(RecordingStore(tmp_path, GROUPS))
    return ConsumerGroupProcessor(
        broker_name="broker-a", manager=ConsumerManager(120_000), locks=RebalanceLockManager(60_000),
        topic_config_manager=topics, subscription_group_manager=groups,
        consumer_offset_manager=ConsumerOffsetManager(tmp_path), static_topics=None,  # type: ignore[arg-type]
        store=None, on_topics_changed=lambda: None, takes_writes=lambda: takes_writes)  # type: ignore[arg-type]


def heartbeat(client_id: str, groups: Iterable[str]) -> consumer_pb2.HeartbeatFrame:
    return consumer_pb2.HeartbeatFrame(client_id=client_id, consumers=[
        consumer_pb2.ConsumerData(group=g, message_model=consumer_pb2.CLUSTERING) for g in groups])


async def session_notices(p: ConsumerGroupProcessor, heartbeats: list[consumer_pb2.HeartbeatFrame],
                          ) -> list[consumer_pb2.GroupNotice]:
    """The notices of a session that sends ``heartbeats`` and then ends, read only after its last heartbeat was
    handled (a client that does not read meanwhile)."""
    handled = asyncio.Event()

    async def frames() -> AsyncIterator[consumer_pb2.HeartbeatFrame]:
        for frame in heartbeats:
            yield frame
        handled.set()  # asked for the next frame: the last one was handled

    stream = p.session(frames(), "peer:1")
    first = asyncio.ensure_future(stream.__anext__())  # starts the session; holds the first notice
    deadline = asyncio.get_running_loop().time() + 30
    while not handled.is_set() and not (first.done() and first.exception() is not None):
        assert asyncio.get_running_loop().time() < deadline, "the heartbeats were not handled"
        await asyncio.sleep(0.01)
    try:
        notices = [await first]
    except StopAsyncIteration:
        return []
    return notices + [n async for n in stream]


def test_a_heartbeat_naming_too_many_groups_ends_the_session_invalid(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(consumer_group_processor, "MAX_GROUPS", 8, raising=False)
    p = processor(tmp_path, takes_writes=False)
    with pytest.raises(RequestError, match="more than 8 groups"):
        asyncio.run(session_notices(p, [heartbeat("c", [f"G{i}" for i in range(9)])]))
    assert p.manager.groups() == []  # nothing of it was registered


def test_a_heartbeat_creates_its_new_groups_off_the_event_loop_and_their_retry_topics_in_one_write(
        tmp_path: Path):
    p = processor(tmp_path)
    names = [f"NewG{i}" for i in range(50)]

    async def scenario() -> int:
        loop_thread = threading.get_ident()
        await session_notices(p, [heartbeat("c", names)])
        return loop_thread

    loop_thread = asyncio.run(scenario())
    topic_puts, group_puts = p.topics.store.puts, p.groups.store.puts  # type: ignore[attr-defined]
    assert [values for values, _ in topic_puts] == [50]  # one write for every retry topic of the frame
    assert all(thread != loop_thread for _, thread in topic_puts + group_puts)
    assert all(p.groups.find(g) is not None and p.topics.select(retry_topic(g)) is not None for g in names)
    reloaded = TopicConfigManager(tmp_path)
    reloaded.load()
    assert all(reloaded.select(retry_topic(g)) is not None for g in names)


def test_a_heartbeat_of_known_groups_writes_nothing(tmp_path: Path):
    p = processor(tmp_path)
    asyncio.run(session_notices(p, [heartbeat("c", ["KnownG"])]))
    writes = len(p.topics.store.puts) + len(p.groups.store.puts)  # type: ignore[attr-defined]
    asyncio.run(session_notices(p, [heartbeat("c", ["KnownG"])] * 3))
    assert len(p.topics.store.puts) + len(p.groups.store.puts) == writes  # type: ignore[attr-defined]


def test_a_client_that_does_not_read_is_owed_one_ids_changed_notice_a_group(tmp_path: Path):
    """Heartbeats that change the members of 50 groups 200 times (client ids alternating) while the client reads
    nothing: it is owed each group's IDS_CHANGED once, not once per change."""
    p = processor(tmp_path, takes_writes=False)
    groups = [f"G{i}" for i in range(50)]
    notices = asyncio.run(session_notices(p, [heartbeat(f"c{i % 2}", groups) for i in range(200)]))
    assert all(n.kind == consumer_pb2.GroupNotice.IDS_CHANGED for n in notices)
    assert {n.group for n in notices} == set(groups)
    assert len(notices) <= 2 * len(groups), len(notices)  # (the first heartbeat's, read at once, and the rest's)
