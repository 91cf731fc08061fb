"""A name server and a broker (KV and tiered storage on) in the test process, with data whose survival we check.

Both run on one asyncio loop in a background thread, as the daemons run them; grpcio-testing drives their
servicers (through ``aio_bridge``).
"""

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc_testing

from broker.broker_config import load_broker_config
from broker.broker_controller import BrokerController
from broker.ha.ha_servicer import HaServicer
from namesrv.namesrv_server import NamesrvConfig, NamesrvServer
from namesrv.namesrv_servicer import NamesrvServicer
from proto import broker_pb2, consumer_pb2, ha_pb2, kv_pb2, namesrv_pb2, pop_pb2, tiered_pb2, transaction_pb2
from tests.boundary.aio_bridge import SyncServicer
from tests.boundary.protected_data import ProtectedData

T = TypeVar("T")
BROKER_NAME = "broker-boundary"


def broker_conf(root: Path, namesrv_addr: str, store_type: str, kv_store_type: str) -> str:
    settings = {
        "brokerName": BROKER_NAME, "listenPort": 0, "brokerIP1": "127.0.0.1", "storePathRootDir": root,
        "namesrvAddr": namesrv_addr, "storeType": store_type, "registerNameServerPeriod": 1000,
        "longPollingMaxSuspendMs": 50, "autoCreateTopicEnable": "true", "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "kvEnable": "true", "kvStoreType": kv_store_type, "tieredStoreEnable": "true",
        "tieredBackendServiceProvider": "memory",
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


class LoopThread:
    """An event loop running in a daemon thread; ``run`` blocks for a coroutine's result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="boundary-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class InProcessCluster:
    loop: LoopThread
    namesrv: NamesrvServer
    broker: BrokerController
    server: Any  # grpc_testing.Server over every service
    protected: ProtectedData = field(default_factory=ProtectedData)

    def seed(self) -> None:
        self.protected.seed(self.broker.broker_addr, f"127.0.0.1:{self.namesrv.port}", BROKER_NAME)

    def assert_intact(self, after: str) -> None:
        self.protected.assert_intact(self.broker.broker_addr, after)


def start_in_process_cluster(root: Path, store_type: str, kv_store_type: str) -> InProcessCluster:
    """``store_type`` and ``kv_store_type`` as broker.conf's ``storeType`` and ``kvStoreType``."""
    loop = LoopThread()
    namesrv = NamesrvServer(NamesrvConfig(host="127.0.0.1", port=0))
    loop.run(namesrv.start())
    conf = broker_conf(root / "broker", f"127.0.0.1:{namesrv.port}", store_type, kv_store_type)
    broker = BrokerController(load_broker_config(conf))
    try:
        loop.run(broker.start())
    except BaseException:
        loop.run(namesrv.stop())
        loop.stop()
        raise
    servicers = {
        broker_pb2.DESCRIPTOR.services_by_name["BrokerService"]: broker.broker_servicer,
        kv_pb2.DESCRIPTOR.services_by_name["KvService"]: broker.kv_servicer,
        tiered_pb2.DESCRIPTOR.services_by_name["TieredService"]: broker.tiered_servicer,
        consumer_pb2.DESCRIPTOR.services_by_name["ConsumerService"]: broker.consumer_servicer,
        ha_pb2.DESCRIPTOR.services_by_name["HaService"]: HaServicer(broker.ha),
        pop_pb2.DESCRIPTOR.services_by_name["PopService"]: broker.pop_servicer,
        transaction_pb2.DESCRIPTOR.services_by_name["TransactionService"]: broker.transaction_servicer,
        # a servicer of its own over the running name server's route table (the server keeps its instance inside)
        namesrv_pb2.DESCRIPTOR.services_by_name["NamesrvService"]: NamesrvServicer(namesrv.manager,
                                                                                   namesrv.runtime_info),
    }
    server = grpc_testing.server_from_dictionary(
        {descriptor: SyncServicer(servicer, descriptor, loop.loop) for descriptor, servicer in servicers.items()},
        grpc_testing.strict_real_time())
    return InProcessCluster(loop, namesrv, broker, server)


def stop_in_process_cluster(cluster: InProcessCluster) -> None:
    try:
        cluster.loop.run(cluster.broker.shutdown())
        cluster.loop.run(cluster.namesrv.stop())
    finally:
        cluster.loop.stop()
