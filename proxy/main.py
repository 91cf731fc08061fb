"""``mqproxy -n NAMESRV [-p 8081] [--host 127.0.0.1]``: the RocketMQ 5 proxy, until SIGTERM or SIGINT."""

import asyncio
import logging
import os
import signal
import sys

import click

from common.metrics import MetricsExporterType
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
@click.option("--metrics-exporter-type", "metrics_exporter_type", type=click.Choice(list(MetricsExporterType)),
              default=MetricsExporterType.DISABLE.value, show_default=True,
              help="PROM: Prometheus metrics on --metrics-prom-exporter-port (metricsExporterType).")
@click.option("--metrics-prom-exporter-port", type=click.IntRange(0, 65535), default=5557, show_default=True,
              help="Port of /metrics; 0 picks a free one (logged as metrics_exporter_started).")
@click.option("--metrics-prom-exporter-host", default="", help="Address of /metrics (default: --host).")
def command(namesrv_addr: str, host: str, port: int, metrics_exporter_type: str, metrics_prom_exporter_port: int,
            metrics_prom_exporter_host: str) -> None:
    """The RocketMQ 5 proxy: apache.rocketmq.v2.MessagingService over this cluster, for the official clients."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not namesrv_addr.strip(" ;"):
        raise click.UsageError("-n/--namesrv-addr names no name server")
    try:
        asyncio.run(serve(ProxyConfig(namesrv_addr=namesrv_addr, host=host, port=port,
                                      metrics_exporter_type=MetricsExporterType(metrics_exporter_type),
                                      metrics_prom_exporter_port=metrics_prom_exporter_port,
                                      metrics_prom_exporter_host=metrics_prom_exporter_host)))
    except (BindError, OSError) as e:
        raise click.ClickException(str(e)) from None


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
    """Console entry point. Errors are one line on stderr, never a traceback: 2 for bad flags, 1 otherwise."""
    try:
        result = command.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.UsageError as e:
        click.echo(f"{PROG}: error: {e.format_message()} (see {PROG} --help)", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"{PROG}: error: {e.format_message()}", err=True)
        return e.exit_code
    except click.Abort:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
