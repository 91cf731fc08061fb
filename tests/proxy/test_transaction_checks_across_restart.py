"""A transaction left open when mqproxy dies is checked back once the proxy is up again and its producer has
reconnected (as RocketMQ 5 clients do: a new Telemetry stream and their settings), not only once the producer sends
another transactional message. A v2 client written here with the v2 stubs, so the reconnect is in the test's hands
(the official Python client reopens its stream only at its 5-minute settings sync); real daemons throughout."""

import queue
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc

from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from tests.cluster import Cluster, Daemon, make_cluster, wait_until
from tests.proxy.conftest import start_proxy
from tests.proxy.test_official_client_send import pull_all

# The first check is due 4 s after the half message: the proxy is killed well before it. Checks that find no
# producer count (the restart takes a while on a loaded machine): far more than the default 15 are allowed.
CHECKS = {"transactionTimeOut": 4000, "transactionCheckInterval": 500, "transactionCheckMax": 1000}
CHECK_DEADLINE_S = 30


class ProducerStream:
    """One v2 producer's Telemetry stream: its settings first, then whatever the proxy pushes."""

    def __init__(self, stub: service_pb2_grpc.MessagingServiceStub, client_id: str, topic: str) -> None:
        self._out: queue.Queue[service_pb2.TelemetryCommand | None] = queue.Queue()
        self._out.put(service_pb2.TelemetryCommand(settings=definition_pb2.Settings(
            client_type=definition_pb2.PRODUCER,
            publishing=definition_pb2.Publishing(topics=[definition_pb2.Resource(name=topic)]))))
        self.call = stub.Telemetry(self._requests(), metadata=[("x-mq-client-id", client_id)],
                                   timeout=CHECK_DEADLINE_S + 30)
        answer = next(self.call)
        assert answer.status.code == definition_pb2.Code.OK, answer.status.message

    def _requests(self) -> Iterator[service_pb2.TelemetryCommand]:
        while (command := self._out.get()) is not None:
            yield command

    def next_check(self) -> service_pb2.RecoverOrphanedTransactionCommand:
        for command in self.call:
            if command.HasField("recover_orphaned_transaction_command"):
                return command.recover_orphaned_transaction_command
        raise AssertionError("the proxy ended the stream without a check")

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()


def test_an_open_transaction_is_checked_after_the_proxy_restarts_and_its_producer_reconnects(tmp_path: Path):
    cluster = make_cluster(tmp_path, registerNameServerPeriod=1000, **CHECKS)
    proxy = start_proxy(tmp_path / "mqproxy", cluster.addr)
    try:
        checked_after_restart(cluster, tmp_path, proxy)
    finally:
        cluster.stop()


def checked_after_restart(cluster: Cluster, tmp_path: Path, proxy: Daemon) -> None:
    topic, client_id = f"ProxyTxRestart_{uuid.uuid4().hex[:8]}", f"tx-producer-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 2)
    port = int(proxy.addr.rsplit(":", 1)[1])
    with grpc.insecure_channel(proxy.addr) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        before = ProducerStream(stub, client_id, topic)
        message = definition_pb2.Message(
            topic=definition_pb2.Resource(name=topic), body=b"left-open",
            system_properties=definition_pb2.SystemProperties(message_id=uuid.uuid4().hex.upper(),
                                                              message_type=definition_pb2.TRANSACTION))
        sent = stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]),
                                metadata=[("x-mq-client-id", client_id)], timeout=10)
        assert sent.status.code == definition_pb2.Code.OK, sent.status.message
        assert sent.entries[0].transaction_id
        proxy.kill()
        before.close()

    proxy = start_proxy(tmp_path / "mqproxy-again", cluster.addr, "-p", str(port))
    try:
        commit_on_check(proxy, client_id, topic, sent.entries[0].transaction_id)
    finally:
        assert proxy.stop() == 0, proxy.log()[-3000:]
    (stored,) = wait_until(lambda: pull_all(cluster.addr, topic), timeout=15, what="the checked commit delivered")
    assert stored.body == b"left-open"


def commit_on_check(proxy: Daemon, client_id: str, topic: str, transaction_id: str) -> None:
    with grpc.insecure_channel(proxy.addr) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        after = ProducerStream(stub, client_id, topic)  # reconnected: settings, no new transactional send
        try:
            check = after.next_check()
        finally:
            after.close()
        assert check.transaction_id == transaction_id
        assert check.message.body == b"left-open"
        ended = stub.EndTransaction(service_pb2.EndTransactionRequest(
            topic=definition_pb2.Resource(name=topic), message_id=check.message.system_properties.message_id,
            transaction_id=check.transaction_id, resolution=definition_pb2.COMMIT,
            source=definition_pb2.SOURCE_SERVER_CHECK), metadata=[("x-mq-client-id", client_id)], timeout=10)
        assert ended.status.code == definition_pb2.Code.OK, ended.status.message
