"""What every daemon shares for operators: the Prometheus exporter (``metricsExporterType=PROM`` on
``metricsPromExporterPort``, RocketMQ's keys), RPC counts and latency by method, and gRPC health checking and
reflection on the daemon's own port.

Metric names follow RocketMQ's exporter where one exists (``rocketmq_rpc_latency`` is in milliseconds, as there).
Each daemon has its own registry, so several daemons in one process (tests) never share a series.
"""

import logging
import time
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer as Health
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from common.rpc_boundary import GenericHandlersOnly

log = logging.getLogger(__name__)

# rocketmq_rpc_latency's buckets (milliseconds), as RocketMQ's exporter
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 10, 25, 50, 100, 250, 500, 1000, 3000, 10000, float("inf"))
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class MetricsExporterType(StrEnum):
    DISABLE = "DISABLE"
    PROM = "PROM"


def new_registry() -> CollectorRegistry:
    """A daemon's registry, with the process's own series (CPU, memory, open files) and the platform's."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


class PromExporter:
    """Serves a registry as Prometheus text on ``http://host:port/metrics`` (any path answers the same)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.port = 0
        self._server: Any = None

    def start(self, host: str, port: int, daemon: str) -> int:
        """Bind (0 = a free port) and serve from a thread; returns the bound port, logged as a structured line."""
        try:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise OSError(f"cannot listen for metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.port = int(self._server.server_port)
        log.info("metrics_exporter_started daemon=%s type=PROM host=%s port=%d path=/metrics", daemon, host,
                 self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def start_exporter(exporter_type: MetricsExporterType | str, host: str, port: int, registry: CollectorRegistry,
                   daemon: str) -> PromExporter | None:
    """The exporter when ``exporter_type`` is PROM, started; None otherwise."""
    if MetricsExporterType(exporter_type) is not MetricsExporterType.PROM:
        return None
    exporter = PromExporter(registry)
    exporter.start(host, port, daemon)
    return exporter


class RpcMetrics:
    """``rocketmq_rpc_requests_total`` by method (every call, counted as it starts) and ``rocketmq_rpc_latency``
    (unary calls, milliseconds) on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("rocketmq_rpc_requests", "gRPC calls taken, by method", ["request_code"],
                                registry=registry)
        self.latency = Histogram("rocketmq_rpc_latency", "gRPC call latency in milliseconds, by method",
                                 ["request_code"], buckets=RPC_LATENCY_BUCKETS_MS, registry=registry)

    def interceptor(self) -> grpc.aio.ServerInterceptor:
        return _RpcMetricsInterceptor(self)


class _RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts each call by its method's short name; times unary-unary calls. The wrapped handler is made once per
    method (and kept while the server hands out the same handler)."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics
        self._handlers: dict[str, tuple[Any, Any, Any]] = {}  # method -> (handler, wrapped, its requests child)

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is None or cached[0] is not handler:
            name = method.rsplit("/", 1)[-1]
            wrapped = handler
            if handler.unary_unary is not None:
                wrapped = handler._replace(unary_unary=_timed(handler.unary_unary,
                                                              self._metrics.latency.labels(name)))
            cached = handler, wrapped, self._metrics.requests.labels(name)
            self._handlers[method] = cached
        cached[2].inc()
        return cached[1]


def _timed(behavior: Callable[..., Any], histogram: Any) -> Callable[..., Any]:
    async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            return await behavior(request, context)
        finally:
            histogram.observe((time.perf_counter() - started) * 1000)

    return timed


async def add_health_and_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> Health:
    """``grpc.health.v1.Health`` (every named service and "" SERVING) and server reflection on ``server``,
    registered as generic handlers like the daemon's own services (``GenericHandlersOnly``)."""
    names = list(service_names)
    health = Health()
    handlers: Any = GenericHandlersOnly(server)
    health_pb2_grpc.add_HealthServicer_to_server(health, handlers)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        ReflectionServicer([*names, HEALTH_SERVICE, reflection.SERVICE_NAME]), handlers)
    for name in ("", *names):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return health


async def set_health(health: Health, service_names: Iterable[str], serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", *service_names):
        await health.set(name, status)
