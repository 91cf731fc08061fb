"""``mqnamesrv``: run the name server until SIGTERM or SIGINT."""

import asyncio
import dataclasses
import logging
import os
import signal
import sys

import click

from common.acl import SUPER, User, parse_credentials, parse_user
from common.daemon_cli import metrics_options, run_command, tls_server_options
from common.grpc_core_log import quiet_answers_not_sent
from common.metrics import MetricsExporterType
from common.open_files_limit import raise_open_files_limit
from common.tls import TlsError, server_tls
from namesrv.controller.controller_store import ControllerStoreError
from namesrv.namesrv_server import DEFAULT_CONTROLLER_STORE_PATH, BindError, NamesrvConfig, NamesrvServer
from namesrv.route_models import DEFAULT_BROKER_EXPIRY_MS

PROG = "mqnamesrv"
log = logging.getLogger("namesrv.main")


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=9876, show_default=True,
              help="Port to listen on; 0 picks a free one (the ready line says which).")
@click.option("--broker-expiry-ms", type=click.IntRange(min=1), default=DEFAULT_BROKER_EXPIRY_MS,
              show_default=True, help="Drop a broker silent for this long (unless it registered its own timeout).")
@click.option("--scan-interval-ms", type=click.IntRange(min=1), default=5000, show_default=True,
              help="How often to look for silent brokers.")
@click.option("--enable-controller", is_flag=True,
              help="Also run the replication controller (enableControllerInNamesrv) on this port.")
@click.option("--controller-store-path", default=DEFAULT_CONTROLLER_STORE_PATH, show_default=True,
              help="Where the controller persists its decisions (controllerStorePath).")
@click.option("--enable-elect-unclean-master", is_flag=True,
              help="Let the controller elect a replica outside the in-sync set when no member is alive "
                   "(enableElectUncleanMaster; may lose committed messages).")
@metrics_options
@tls_server_options
@click.option("--authentication-enabled", is_flag=True, expose_value=False, callback=lambda c, p, v: _acl(c, p, v),
              help="Refuse broker registration and other writes not signed by the inner credentials or the super "
                   "user (authenticationEnabled).")
@click.option("--inner-client-authentication-credentials", metavar="JSON", expose_value=False,
              callback=lambda c, p, v: _acl(c, p, v),
              help='What brokers sign with: {"accessKey":..,"secretKey":..} (innerClientAuthenticationCredentials).')
@click.option("--init-authentication-user", metavar="JSON", expose_value=False, callback=lambda c, p, v: _acl(c, p, v),
              help='The super user operators sign with: {"username":..,"password":..} (initAuthenticationUser).')
def command(host: str, port: int, broker_expiry_ms: int, scan_interval_ms: int, enable_controller: bool,
            controller_store_path: str, enable_elect_unclean_master: bool, metrics_exporter_type: str,
            metrics_prom_exporter_port: int, metrics_prom_exporter_host: str, tls_enable: bool, tls_cert: str,
            tls_key: str) -> None:
    """The name server: broker registry and topic routes (and, optionally, the replication controller)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_answers_not_sent()  # gRPC's traceback for an answer a gone client did not take: one line
    try:
        tls = server_tls(tls_enable, tls_cert, tls_key)
    except TlsError as e:
        raise click.UsageError(str(e)) from None
    config = NamesrvConfig(host=host, port=port, broker_expiry_ms=broker_expiry_ms,
                           scan_interval_ms=scan_interval_ms, enable_controller=enable_controller,
                           controller_store_path=os.path.expanduser(controller_store_path),
                           enable_elect_unclean_master=enable_elect_unclean_master,
                           metrics_exporter_type=MetricsExporterType(metrics_exporter_type),
                           metrics_prom_exporter_port=metrics_prom_exporter_port,
                           metrics_prom_exporter_host=metrics_prom_exporter_host, tls=tls)
    config = with_acl(config, click.get_current_context().meta)
    raise_open_files_limit()  # one descriptor a connection
    try:
        asyncio.run(serve(config))
    except (BindError, ControllerStoreError, OSError) as e:
        raise click.ClickException(str(e)) from None


def _acl(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value:
        ctx.meta[f"acl.{param.name}"] = value


def with_acl(config: NamesrvConfig, meta: dict) -> NamesrvConfig:
    """The ACL options (kept in ``meta`` by their callbacks) applied to ``config``."""
    users = []
    try:
        if meta.get("acl.inner_client_authentication_credentials"):
            ak, sk = parse_credentials(meta["acl.inner_client_authentication_credentials"])
            users.append(User(ak, sk, SUPER))
        if meta.get("acl.init_authentication_user"):
            name, password = parse_user(meta["acl.init_authentication_user"])
            users.append(User(name, password, SUPER))
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    enabled = bool(meta.get("acl.authentication_enabled"))
    if enabled and not users:
        raise click.UsageError("--authentication-enabled needs --inner-client-authentication-credentials (and/or "
                               "--init-authentication-user)")
    return dataclasses.replace(config, authentication_enabled=enabled, acl_users=tuple(users))


async def serve(config: NamesrvConfig) -> None:
    server = NamesrvServer(config)
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{PROG} ready on {config.host}:{port}", flush=True)
    await stop.wait()
    log.info("namesrv_stopping reason=signal")
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    return run_command(command, argv, PROG)

if __name__ == "__main__":
    sys.exit(main())
