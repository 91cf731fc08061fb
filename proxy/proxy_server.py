"""The proxy's lifecycle (upstream's ProxyStartup): the collaborators, the gRPC server, a graceful stop."""

import asyncio
import contextlib
import logging

import grpc

from client.admin import Admin
from client.static_route import master_of
from common import grpc_keepalive
from common.acl import set_inner_credentials, warn_authorization_without_authentication
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
from common.tls import add_port
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc
from proxy.broker_channels import BrokerChannels
from proxy.broker_send_streams import BrokerSendStreams
from proxy.group_settings import GroupSettingsService
from proxy.loop_producer import LoopProducer
from proxy.messaging_servicer import MessagingServicer
from proxy.processor.assignment_processor import AssignmentProcessor
from proxy.processor.client_processor import ClientProcessor
from proxy.processor.consume_processor import ConsumeProcessor
from proxy.processor.receipt_handle_renewer import ReceiptHandleRenewer
from proxy.processor.route_processor import RouteProcessor
from proxy.processor.send_processor import SendProcessor
from proxy.processor.transaction_processor import TransactionProcessor
from proxy.proxy_acl import BrokerAuthority, ProxyAclInterceptor
from proxy.proxy_config import ProxyConfig
from proxy.telemetry_channels import TelemetryChannels
from proxy.topic_route_service import TopicRouteService
from proxy.v2_codes import ProxyError

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a send of a 4 MiB body, or a receive of 32 such messages, with room to spare
PRODUCER_GROUP = "MQPROXY_PRODUCER"  # v2 producers have no group: the proxy's sends name this one


class BindError(RuntimeError):
    """The listen address cannot be bound (in use, or not an address of this host)."""


def own_endpoints(host: str, port: int) -> definition_pb2.Endpoints:
    """The proxy's address for routes whose request names no access point."""
    scheme = definition_pb2.IPv4 if host.replace(".", "").isdigit() else definition_pb2.DOMAIN_NAME
    return definition_pb2.Endpoints(scheme=scheme, addresses=[definition_pb2.Address(host=host, port=port)])


class ProxyServer:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._producer: LoopProducer | None = None
        self._transaction: TransactionProcessor | None = None
        self._admin: Admin | None = None
        self._routes: TopicRouteService | None = None
        self._brokers = BrokerChannels()
        self._send_streams = BrokerSendStreams(self._brokers)
        self.channels = TelemetryChannels()
        self.registry = new_registry()
        self.rpc_metrics = RpcMetrics(self.registry)  # v2 calls by method; unary ones timed
        self.metrics_exporter: PromExporter | None = None
        self.health: Health | None = None
        self._renewer: ReceiptHandleRenewer | None = None
        self._renew_task: asyncio.Task[None] | None = None
        self._sweep_task: asyncio.Task[None] | None = None  # closes streams and channels to brokers no route names

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the real one when the config says 0)."""
        c = self.config
        prom = c.metrics_exporter_type is MetricsExporterType.PROM
        interceptors: list[grpc.aio.ServerInterceptor] = [RequestDecoding()]
        if prom:
            interceptors.append(self.rpc_metrics.interceptor())
        if c.authentication_enabled or c.authorization_enabled:
            interceptors.append(self._acl_interceptor())
        self._server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # a second proxy on the same port must fail to bind, not share it
            *grpc_keepalive.SERVER_OPTIONS,
        ])
        address = f"{c.host}:{c.port}"
        try:
            self.port = add_port(self._server, address, c.tls)
        except RuntimeError as e:  # gRPC's only signal for a failed bind
            raise BindError(f"cannot listen on {address}: {e}") from None
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self._servicer(), self._server)
        self.health = await add_health_and_reflection(
            self._server, [service_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name])
        await self._server.start()
        assert self._renewer is not None
        self._renew_task = asyncio.create_task(self._renewer.run(), name="auto-renew")
        assert self._producer is not None
        client = self._producer.client  # its producer sessions and recalls use the SDK's own channels
        self._sweep_task = asyncio.create_task(self._send_streams.sweep_periodically(
            client.route_addrs, also=client.close_unrouted_channels), name="broker-channel-sweep")
        if prom:
            try:
                self.metrics_exporter = start_exporter(c.metrics_exporter_type, c.metrics_prom_exporter_host or c.host,
                                                       c.metrics_prom_exporter_port, self.registry, "proxy")
            except BaseException:  # (its port taken): stopped here, not in a finalizer after the loop closed
                await self.stop()
                raise
        log.info("proxy_started host=%s port=%d namesrv=%s", c.host, self.port, c.namesrv_addr)
        return self.port

    def _acl_interceptor(self) -> ProxyAclInterceptor:
        def masters() -> list[str]:
            assert self._admin is not None
            return [b.addr for b in self._admin.all_masters()]
        async def topic_masters(topic: str) -> list[str]:
            if self._routes is None:
                return []
            try:
                route = await self._routes.route(topic)
            except ProxyError:  # no route (yet): any master decides
                return []
            return sorted({a for qd in route.queue_datas if (a := master_of(route, qd.broker_name)) is not None})

        authority = BrokerAuthority(masters, self._brokers, self.config.rpc_timeout_s, topic_masters)
        warn_authorization_without_authentication(self.config.authentication_enabled,
                                                  self.config.authorization_enabled, "mqproxy")
        return ProxyAclInterceptor(authority, self.config.authentication_enabled, self.config.authorization_enabled)

    def _servicer(self) -> MessagingServicer:
        c = self.config
        if c.inner_credentials is not None:
            set_inner_credentials(c.inner_credentials)  # the POP calls on self._brokers sign with them
        self._producer = LoopProducer(asyncio.get_running_loop(), self._send_streams, c.namesrv_addr,
                                      group=PRODUCER_GROUP, send_timeout_ms=c.send_timeout_ms,
                                      credentials=c.inner_credentials)
        self._admin = Admin(c.namesrv_addr, rpc_timeout_ms=int(c.rpc_timeout_s * 1000),
                            credentials=c.inner_credentials)
        routes = self._routes = TopicRouteService(self._producer.client, self._brokers)  # one route cache for all
        endpoints = own_endpoints(c.host, self.port)
        self._transaction = TransactionProcessor(self.channels, self._producer, routes=routes)
        transaction = self._transaction
        consume = ConsumeProcessor(routes, self._brokers, c, online=self.channels.online)
        self._renewer = consume.renewer
        self._producer.client.on_route_forgotten.append(consume.forget_topic)
        self.channels.on_client_gone.append(consume.renewer.forget_client)
        return MessagingServicer(
            route=RouteProcessor(routes, endpoints), assignment=AssignmentProcessor(routes, endpoints),
            send=SendProcessor(self._producer, transaction, c.max_body_size), consume=consume,
            client=ClientProcessor(GroupSettingsService(self._admin, c.settings_cache_s), c,
                                   on_client_gone=consume.renewer.forget_client,
                                   on_publishing=transaction.publishes),
            transaction=transaction, channels=self.channels)

    async def stop(self) -> None:
        """Stop accepting calls, end the telemetry streams (they never end by themselves), let in-flight calls
        finish within the grace period, then close the connections to the cluster."""
        self.channels.close_all()
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.metrics_exporter is not None:
            await asyncio.to_thread(self.metrics_exporter.stop)
        if self._server is not None:
            await self._server.stop(self.config.shutdown_grace_s)
        for task in (self._renew_task, self._sweep_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._send_streams.close()
        await self._brokers.close()
        if self._transaction is not None:
            await asyncio.to_thread(self._transaction.close)
        for closable in (self._producer, self._admin):
            if closable is not None:
                await asyncio.to_thread(closable.close)
        log.info("proxy_stopped port=%d", self.port)
