"""A fake broker replica for controller tests: one ControllerSession stream over a real gRPC channel."""

import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from proto import controller_pb2, controller_pb2_grpc
from tests.cluster import Daemon, start_namesrv, wait_until

CLUSTER = "DefaultCluster"
HEARTBEAT_TIMEOUT_MS = 60_000  # one heartbeat keeps a replica alive for the whole test: no timing in play
Predicate = Callable[[controller_pb2.ReplicaAssignment], bool]


def start_controller(workdir: Path, store: Path, *extra: str) -> Daemon:
    return start_namesrv(workdir, "--enable-controller", "--controller-store-path", str(store), *extra)


def heartbeat(broker_name: str, broker_id: int, *, max_offset: int = 0, master_epoch: int = 0,
              heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS) -> controller_pb2.BrokerHeartbeat:
    return controller_pb2.BrokerHeartbeat(
        cluster_name=CLUSTER, broker_name=broker_name, broker_id=broker_id,
        broker_addr=f"127.0.0.1:{20900 + broker_id}", ha_addr=f"127.0.0.1:{20950 + broker_id}",
        master_epoch=master_epoch, max_offset=max_offset, confirm_offset=max_offset,
        heartbeat_timeout_ms=heartbeat_timeout_ms)


class ReplicaSession:
    """Sends heartbeats on demand and collects every assignment the controller answers or pushes."""

    def __init__(self, addr: str, broker_name: str, broker_id: int, **fields: int) -> None:
        self.broker_name, self.broker_id = broker_name, broker_id
        self.channel = grpc.insecure_channel(addr)
        self._outgoing: queue.Queue[controller_pb2.BrokerHeartbeat | None] = queue.Queue()
        self.received: list[controller_pb2.ReplicaAssignment] = []
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        stub = controller_pb2_grpc.ControllerServiceStub(self.channel)
        self.call = stub.ControllerSession(iter(self._outgoing.get, None))
        threading.Thread(target=self._read, name=f"replica-{broker_name}-{broker_id}", daemon=True).start()
        self.beat(**fields)

    def _read(self) -> None:
        try:
            for assignment in self.call:
                self.received.append(assignment)
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.ended.set()

    def beat(self, **fields: int) -> None:
        self._outgoing.put(heartbeat(self.broker_name, self.broker_id, **fields))

    def wait_for(self, predicate: Predicate, timeout: float = 10.0,
                 what: str = "an assignment") -> controller_pb2.ReplicaAssignment:
        """The first assignment received so far (or within ``timeout``) that satisfies ``predicate``."""
        def found() -> controller_pb2.ReplicaAssignment | None:
            return next((a for a in list(self.received) if predicate(a)), None)

        assignment = wait_until(found, timeout=timeout, interval=0.01, what=f"{what} on replica {self.broker_id}")
        assert assignment is not None  # wait_until returns only a truthy value
        return assignment

    def cancel(self) -> None:
        """As a broker whose process died: the stream is reset, not closed."""
        self.call.cancel()
        self.ended.wait(10)

    def close(self) -> None:
        self._outgoing.put(None)
        self.call.cancel()
        self.channel.close()


def sessions(addr: str, broker_name: str, *ids: int) -> Iterator[ReplicaSession]:
    """Replicas opened one after another, each once the controller answered it (so the first is master)."""
    for broker_id in ids:
        session = ReplicaSession(addr, broker_name, broker_id)
        session.wait_for(lambda a: True, what="the first answer")
        yield session
