"""``mqproxy -n NAMESRV [-p 8081] [--host 127.0.0.1]``: the RocketMQ 5 proxy, until SIGTERM or SIGINT."""

import asyncio
import dataclasses
import logging
import os
import signal
import sys

import click

from client.switch_interval import keep_switch_interval
from common.acl import parse_credentials
from common.daemon_cli import metrics_options, run_command, tls_server_options
from common.grpc_core_log import quiet_answers_not_sent
from common.metrics import MetricsExporterType
from common.open_files_limit import raise_open_files_limit
from common.tls import TlsError, server_tls, set_process_ca
from proxy.proxy_config import DEFAULT_PORT, ProxyConfig
from proxy.proxy_server import BindError, ProxyServer

PROG = "mqproxy"
log = logging.getLogger("proxy.main")


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namesrv-addr", envvar="NAMESRV_ADDR", required=True,
              help="Name servers, 'host:port;host:port' (or NAMESRV_ADDR).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on; 0 picks a free one (the ready line says which).")
@click.option("--default-invisible-ms", type=click.IntRange(1000, 12 * 3600 * 1000), default=60_000,
              show_default=True, help="A PushConsumer's messages are invisible this long, renewed by as much while it "
              "consumes them (defaultInvisibleTimeMills).")
@click.option("--renew-ahead-ms", type=click.IntRange(100, None), default=10_000, show_default=True,
              help="How long before a PushConsumer's message would become visible the proxy renews it "
              "(renewAheadTimeMillis; below --default-invisible-ms).")
@metrics_options
@tls_server_options
@click.option("--tls-ca", default="", metavar="PATH",
              help="Connect to the name servers and brokers over TLS, trusting this CA file (PEM).")
@click.option("--authentication-enabled", is_flag=True, expose_value=False, callback=lambda c, p, v: _acl(c, p, v),
              help="Refuse v2 calls not signed with a broker user's credentials (authenticationEnabled); a broker "
                   "checks each signature for the proxy.")
@click.option("--authorization-enabled", is_flag=True, expose_value=False, callback=lambda c, p, v: _acl(c, p, v),
              help="Refuse sends without Pub and receives without Sub on the topic (and group) per the brokers' "
                   "ACL policies (authorizationEnabled).")
@click.option("--inner-client-authentication-credentials", metavar="JSON", expose_value=False,
              callback=lambda c, p, v: _acl(c, p, v),
              help='What the proxy signs its calls to brokers and name servers with: {"accessKey":..,"secretKey":..} '
                   "(innerClientAuthenticationCredentials; the brokers' own).")
def command(namesrv_addr: str, host: str, port: int, default_invisible_ms: int, renew_ahead_ms: int,
            metrics_exporter_type: str, metrics_prom_exporter_port: int, metrics_prom_exporter_host: str,
            tls_enable: bool, tls_cert: str, tls_key: str, tls_ca: str) -> None:
    """The RocketMQ 5 proxy: apache.rocketmq.v2.MessagingService over this cluster, for the official clients."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_answers_not_sent()  # gRPC's traceback for an answer a gone client did not take: one line
    if not namesrv_addr.strip(" ;"):
        raise click.UsageError("-n/--namesrv-addr names no name server")
    if renew_ahead_ms >= default_invisible_ms:
        raise click.UsageError(f"--renew-ahead-ms {renew_ahead_ms} must be below --default-invisible-ms "
                               f"{default_invisible_ms}")
    try:
        tls = server_tls(tls_enable, tls_cert, tls_key)
    except TlsError as e:
        raise click.UsageError(str(e)) from None
    try:
        set_process_ca(tls_ca or None)  # the SDK clients and broker channels the proxy opens
    except TlsError as e:  # a file that cannot be used, as the broker's tlsClientCaPath: exit 1
        raise click.ClickException(str(e)) from None
    try:
        config = ProxyConfig(namesrv_addr=namesrv_addr, host=host, port=port,
                             default_invisible_ms=default_invisible_ms, renew_ahead_ms=renew_ahead_ms,
                             metrics_exporter_type=MetricsExporterType(metrics_exporter_type),
                             metrics_prom_exporter_port=metrics_prom_exporter_port,
                             metrics_prom_exporter_host=metrics_prom_exporter_host, tls=tls)
        raise_open_files_limit()  # one descriptor a connection
        asyncio.run(serve(with_acl(config, click.get_current_context().meta)))
    except (BindError, OSError) as e:
        raise click.ClickException(str(e)) from None


def _acl(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value:
        ctx.meta[f"acl.{param.name}"] = value


def with_acl(config: ProxyConfig, meta: dict) -> ProxyConfig:
    """The ACL options (kept in ``meta`` by their callbacks, as mqnamesrv's) applied to ``config``."""
    inner = None
    if meta.get("acl.inner_client_authentication_credentials"):
        try:
            inner = parse_credentials(meta["acl.inner_client_authentication_credentials"])
        except ValueError as e:
            raise click.UsageError(str(e)) from None
    authn, authz = bool(meta.get("acl.authentication_enabled")), bool(meta.get("acl.authorization_enabled"))
    if (authn or authz) and inner is None:
        raise click.UsageError("--authentication-enabled/--authorization-enabled need "
                               "--inner-client-authentication-credentials (the proxy asks the brokers with them)")
    if inner is not None and not (authn or authz):
        log.warning("acl_inner_credentials_without_acl access_key=%s why='--authentication-enabled and "
                    "--authorization-enabled are off: every unsigned client is served with these credentials, which "
                    "the brokers trust as their own'", inner[0])
    return dataclasses.replace(config, authentication_enabled=authn, authorization_enabled=authz,
                               inner_credentials=inner)


async def serve(config: ProxyConfig) -> None:
    server = ProxyServer(config)
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{PROG} ready on {config.host}:{port}", flush=True)
    await stop.wait()
    log.info("proxy_stopping reason=signal pid=%d", os.getpid())
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    # Its SDK producers would lower the switch interval; its sends through the proxy measured 11-15% slower so.
    keep_switch_interval()
    return run_command(command, argv, PROG)

if __name__ == "__main__":
    sys.exit(main())
