"""A slave's ack read before the master's stream resumed after sending the frame it acknowledges: the master took
it for an ack past what the stream sent (``ack_ignored``), and a SYNC_MASTER's send waited for the slave's next
ack, a second later. In process: the real HAService and commitlog, the slave's side played by the test."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.ha import ha_service
from broker.ha.broker_role import BrokerRole
from broker.ha.epoch_file import EpochFile
from broker.ha.ha_service import GroupIdentity, HAService
from broker.store.message_store import MessageStore
from proto import ha_pb2
from tests.store.conftest import store_config

SEGMENT = 1024 * 1024


def test_an_ack_read_before_the_stream_resumes_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = MessageStore(store_config(tmp_path / "store", mapped_file_size_commit_log=SEGMENT))
    store.start()
    try:
        asyncio.run(_ack_before_resume(store))
    finally:
        store.shutdown()
    assert "ack_ignored" not in caplog.text


async def _ack_before_resume(store: MessageStore) -> None:
    identity = GroupIdentity("DefaultCluster", "broker-a", 0, "127.0.0.1:1", SEGMENT)
    ha = HAService(BrokerRole.SYNC_MASTER, identity, store.commit_log, asyncio.get_running_loop())
    assert store.put_messages("AckT", 0, [b"m"], [b""]).ok
    end = store.commit_log.max_offset()
    inbox: asyncio.Queue[ha_pb2.ReplicaFrame | None] = asyncio.Queue()
    await inbox.put(ha_pb2.ReplicaFrame(handshake=ha_pb2.ReplicaHandshake(
        cluster_name="DefaultCluster", broker_name="broker-a", broker_id=1, commit_log_end=0,
        mapped_file_size=SEGMENT, starts_anywhere=True)))

    async def frames() -> AsyncIterator[ha_pb2.ReplicaFrame]:
        while (frame := await inbox.get()) is not None:
            yield frame

    stream = ha.replicate(frames())
    welcome = await anext(stream)
    assert welcome.offset == 0
    data = await anext(stream)
    assert data.offset == 0 and len(data.data) == end
    # The slave acks at once; the ack reader runs before the stream is asked for its next frame.
    await inbox.put(ha_pb2.ReplicaFrame(ack_offset=end))
    for _ in range(20):
        await asyncio.sleep(0)
    assert ha.replicated_offset() == end  # was 0: the ack was ignored
    await inbox.put(None)
    await stream.aclose()


def test_a_replica_joins_the_in_sync_set_only_once_it_holds_the_master_s_metadata(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caught-up replica that had not copied its master's topics and mappings yet joined the in-sync set; its
    master killed then, it was elected and served no topic (the KV store had no shard leader): the replica says in
    its acks when its copy is taken, and joins only from then on. A replica of an older release does not say, and
    joins as before. The master says once per stream that a replica is not joining for want of the copy."""
    monkeypatch.setattr(ha_service, "NOT_JOINING_WARN_S", 0.0)
    store = MessageStore(store_config(tmp_path / "store", mapped_file_size_commit_log=SEGMENT))
    store.start()
    try:
        asyncio.run(_joins_after_metadata(store, tmp_path / "epochs"))
    finally:
        store.shutdown()
    said = [r.getMessage() for r in caplog.records if "replica_not_joining" in r.getMessage()]
    assert len(said) == 2 and all("slave_id=2 " in line for line in said), said  # once a stream; never the old one


async def _joins_after_metadata(store: MessageStore, epoch_path: Path) -> None:
    epochs = EpochFile(epoch_path)
    epochs.assign(1, 0)
    identity = GroupIdentity("DefaultCluster", "broker-a", 1, "127.0.0.1:1", SEGMENT)
    ha = HAService(BrokerRole.SYNC_MASTER, identity, store.commit_log, asyncio.get_running_loop(), epochs=epochs)
    ha.become_master(1, [1], 1)
    assert store.put_messages("AckT", 0, [b"m"], [b""]).ok
    end = store.commit_log.max_offset()

    async def joined(slave_id: int, reports: bool, acks: list[ha_pb2.ReplicaFrame]) -> list[frozenset[int]]:
        inbox: asyncio.Queue[ha_pb2.ReplicaFrame | None] = asyncio.Queue()
        await inbox.put(ha_pb2.ReplicaFrame(handshake=ha_pb2.ReplicaHandshake(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_id=slave_id, commit_log_end=0,
            mapped_file_size=SEGMENT, starts_anywhere=True, master_epoch=1, reports_metadata_copy=reports)))

        async def frames() -> AsyncIterator[ha_pb2.ReplicaFrame]:
            while (frame := await inbox.get()) is not None:
                yield frame

        stream = ha.replicate(frames())
        await anext(stream)  # the welcome
        await anext(stream)  # the bytes
        proposals = []
        for i, ack in enumerate(acks):
            await inbox.put(ack)
            for _ in range(20):
                await asyncio.sleep(0)
            proposal = ha.check_sync_state_set(1000 * (i + 1))
            proposals.append(proposal.members if proposal is not None else frozenset())
        await inbox.put(None)
        await stream.aclose()
        ha.sync_state_set.pending = None
        return proposals

    caught_up = ha_pb2.ReplicaFrame(ack_offset=end)
    copied = ha_pb2.ReplicaFrame(ack_offset=end, metadata_copied=True)
    assert await joined(2, True, [caught_up] * 4) == [frozenset()] * 4  # caught up, never proposed
    assert frozenset({2}) in await joined(2, True, [caught_up, caught_up, copied, copied])
    assert frozenset({3}) in await joined(3, False, [caught_up] * 4)  # an older release
