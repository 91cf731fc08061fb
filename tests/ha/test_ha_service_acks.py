"""A slave's ack read before the master's stream resumed after sending the frame it acknowledges: the master took
it for an ack past what the stream sent (``ack_ignored``), and a SYNC_MASTER's send waited for the slave's next
ack, a second later. In process: the real HAService and commitlog, the slave's side played by the test."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.ha.broker_role import BrokerRole
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
