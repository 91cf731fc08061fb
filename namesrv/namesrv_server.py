"""The name server's lifecycle (RocketMQ's NamesrvController): gRPC server, expiry scan, graceful stop."""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from common.rpc_boundary import RequestDecoding
from namesrv.controller.controller_service import ControllerService
from namesrv.controller.controller_servicer import ControllerServicer
from namesrv.controller.controller_store import ControllerStore
from namesrv.controller.replicas_info_manager import ReplicasInfoManager
from namesrv.namesrv_servicer import NamesrvServicer
from namesrv.route_info_manager import RouteInfoManager
from namesrv.route_models import DEFAULT_BROKER_EXPIRY_MS
from proto import controller_pb2_grpc, namesrv_pb2_grpc

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


class NamesrvServer:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.manager = RouteInfoManager(broker_expiry_ms=config.broker_expiry_ms)
        self.port = 0
        self._started_at = time.monotonic()
        self._server: grpc.aio.Server | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self.controller: ControllerService | None = None

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the real one when the config says 0)."""
        self._server = grpc.aio.server(interceptors=[RequestDecoding()], options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # gRPC sets SO_REUSEPORT by default: a second name server on the same port would bind "successfully"
            # and silently share the traffic.
            ("grpc.so_reuseport", 0),
        ])
        namesrv_pb2_grpc.add_NamesrvServiceServicer_to_server(
            NamesrvServicer(self.manager, self.runtime_info), self._server)
        address = f"{self.config.host}:{self.config.port}"
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as e:  # gRPC's only signal for a failed bind
            raise BindError(f"cannot listen on {address}: {e}") from None
        if self.config.enable_controller:  # after the bind: a name server that cannot serve must not lock the store
            self.controller = self._open_controller()
            controller_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(self.controller),
                                                                        self._server)
        await self._server.start()
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
