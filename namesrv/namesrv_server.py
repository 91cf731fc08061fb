"""The name server's lifecycle (RocketMQ's NamesrvController): gRPC server, expiry scan, graceful stop."""

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import grpc_keepalive
from common.acl import ADMIN, AclInterceptor, Authority, User, method_action
from common.metrics import (
    Health,
    MetricsExporterType,
    PromExporter,
    RpcMetrics,
    add_health_and_reflection,
    new_registry,
    start_exporter,
)
from common.rpc_boundary import RequestDecoding
from common.tls import ServerTls, add_port
from namesrv.controller.controller_service import ControllerService
from namesrv.controller.controller_servicer import ControllerServicer
from namesrv.controller.controller_store import ControllerStore
from namesrv.controller.replicas_info_manager import ReplicasInfoManager
from namesrv.namesrv_servicer import NamesrvServicer
from namesrv.route_info_manager import RouteInfoManager
from namesrv.route_models import DEFAULT_BROKER_EXPIRY_MS
from proto import controller_pb2, controller_pb2_grpc, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a full registration of a million topics is tens of MiB
DEFAULT_CONTROLLER_STORE_PATH = "~/store/controller"


class BindError(RuntimeError):
    """The listen address cannot be bound (in use, or not an address of this host)."""


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    host: str = "127.0.0.1"
    port: int = 9876  # 0: pick a free port
    broker_expiry_ms: int = DEFAULT_BROKER_EXPIRY_MS
    scan_interval_ms: int = 5000
    shutdown_grace_s: float = 5.0
    # The replication controller (enableControllerInNamesrv): served on this same port when on, absent otherwise
    # (its RPCs then answer UNIMPLEMENTED, which tells mqadmin to ask the next name server).
    enable_controller: bool = False
    controller_store_path: str = DEFAULT_CONTROLLER_STORE_PATH  # "~" is expanded
    enable_elect_unclean_master: bool = False
    # Prometheus text on http://host:metricsPromExporterPort/metrics when PROM (0 = a free port, logged)
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""  # empty: the listen host
    tls: ServerTls | None = None  # --tls-enable: the port serves TLS only
    # --authentication-enabled: broker registration and the other writes need a call signed by one of these
    # (Super) users: the brokers' inner credentials, and the operators' super user; route reads stay open
    authentication_enabled: bool = False
    acl_users: tuple[User, ...] = ()


class NamesrvServer:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.manager = RouteInfoManager(broker_expiry_ms=config.broker_expiry_ms)
        self.port = 0
        self._started_at = time.monotonic()
        self._server: grpc.aio.Server | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self.controller: ControllerService | None = None
        self.registry = new_registry()
        self.registry.register(_RouteCollector(self.manager))
        self.rpc_metrics = RpcMetrics(self.registry)
        self.metrics_exporter: PromExporter | None = None
        self.health: Health | None = None

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the real one when the config says 0)."""
        prom = self.config.metrics_exporter_type is MetricsExporterType.PROM
        interceptors: list[grpc.aio.ServerInterceptor] = [RequestDecoding()]
        if self.config.authentication_enabled:
            interceptors.insert(0, AclInterceptor(Authority(self.config.acl_users), checked_methods=_is_admin))
        if prom:
            interceptors.append(self.rpc_metrics.interceptor())
        self._server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # gRPC sets SO_REUSEPORT by default: a second name server on the same port would bind "successfully"
            # and silently share the traffic.
            ("grpc.so_reuseport", 0),
            *grpc_keepalive.SERVER_OPTIONS,
        ])
        namesrv_pb2_grpc.add_NamesrvServiceServicer_to_server(
            NamesrvServicer(self.manager, self.runtime_info), self._server)
        address = f"{self.config.host}:{self.config.port}"
        try:
            self.port = add_port(self._server, address, self.config.tls)
        except RuntimeError as e:  # gRPC's only signal for a failed bind
            raise BindError(f"cannot listen on {address}: {e}") from None
        if self.config.enable_controller:  # after the bind: a name server that cannot serve must not lock the store
            self.controller = self._open_controller()
            controller_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(self.controller),
                                                                        self._server)
        services = [namesrv_pb2.DESCRIPTOR.services_by_name["NamesrvService"].full_name]
        if self.controller is not None:
            services.append(controller_pb2.DESCRIPTOR.services_by_name["ControllerService"].full_name)
        self.health = await add_health_and_reflection(self._server, services)
        await self._server.start()
        if prom:
            c = self.config
            try:
                self.metrics_exporter = start_exporter(c.metrics_exporter_type, c.metrics_prom_exporter_host or c.host,
                                                       c.metrics_prom_exporter_port, self.registry, "namesrv")
            except BaseException:  # (its port taken): the server stops here, not in a finalizer after the loop closed
                await self._server.stop(None)
                raise
        if self.controller is not None:
            await self.controller.start()
        self._scan_task = asyncio.create_task(self._scan_loop(), name="scan-not-active-brokers")
        log.info("namesrv_started host=%s port=%d broker_expiry_ms=%d scan_interval_ms=%d", self.config.host,
                 self.port, self.config.broker_expiry_ms, self.config.scan_interval_ms)
        return self.port

    def _open_controller(self) -> ControllerService:
        """Lock and load the controller store; raises ControllerStoreError (one line for the operator)."""
        store_path = Path(self.config.controller_store_path).expanduser()
        manager = ReplicasInfoManager(ControllerStore(store_path), self.config.enable_elect_unclean_master)
        log.info("controller_started store=%s groups=%d enable_elect_unclean_master=%s", store_path,
                 manager.group_count, self.config.enable_elect_unclean_master)
        return ControllerService(manager)

    async def stop(self) -> None:
        """Stop accepting calls, let in-flight ones finish within the grace period, stop the scan."""
        if self.controller is not None:  # first: its streams never end by themselves
            await self.controller.stop()
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.metrics_exporter is not None:
            await asyncio.to_thread(self.metrics_exporter.stop)
        if self._server is not None:
            await self._server.stop(self.config.shutdown_grace_s)
        if self.controller is not None:
            self.controller.manager.close()
        log.info("namesrv_stopped port=%d", self.port)

    def runtime_info(self) -> dict[str, str]:
        return {
            "broker_expiry_ms": str(self.config.broker_expiry_ms),
            "scan_interval_ms": str(self.config.scan_interval_ms),
            "controller_enabled": str(self.config.enable_controller).lower(),
            "uptime_ms": str(int((time.monotonic() - self._started_at) * 1000)),
        }

    async def _scan_loop(self) -> None:
        interval_s = self.config.scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self.manager.scan_not_active_brokers)
            except Exception:  # one failed scan must not end expiry for the life of the process
                log.exception("scan_not_active_brokers_failed")


def _is_admin(method: str) -> bool:
    return method_action(method) == ADMIN


class _RouteCollector(Collector):
    """The name server's tables, read at scrape time."""

    def __init__(self, manager: RouteInfoManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        m = self.manager
        with m._lock:  # a consistent view of the tables (a scrape holds it for a few dict sizes)
            live = len(m.broker_live_table)
            brokers = len(m.broker_addr_table)
            clusters = len(m.cluster_addr_table)
            topics = len(m.topic_queue_table)
            queue_routes = sum(len(queues) for queues in m.topic_queue_table.values())
        for name, doc, value in (
            ("rocketmq_namesrv_live_brokers", "Broker addresses registered and not expired", live),
            ("rocketmq_namesrv_brokers", "Broker names (groups) known", brokers),
            ("rocketmq_namesrv_clusters", "Clusters known", clusters),
            ("rocketmq_namesrv_topics", "Topics with a route", topics),
            ("rocketmq_namesrv_routes", "Topic routes: (topic, broker) queue entries", queue_routes),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
