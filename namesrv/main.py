"""``mqnamesrv``: run the name server until SIGTERM or SIGINT."""

import asyncio
import logging
import os
import signal
import sys

import click

from common.metrics import MetricsExporterType
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
@click.option("--metrics-exporter-type", "metrics_exporter_type", type=click.Choice(list(MetricsExporterType)),
              default=MetricsExporterType.DISABLE.value, show_default=True,
              help="PROM: Prometheus metrics on --metrics-prom-exporter-port (metricsExporterType).")
@click.option("--metrics-prom-exporter-port", type=click.IntRange(0, 65535), default=5557, show_default=True,
              help="Port of /metrics; 0 picks a free one (logged as metrics_exporter_started).")
@click.option("--metrics-prom-exporter-host", default="", help="Address of /metrics (default: --host).")
def command(host: str, port: int, broker_expiry_ms: int, scan_interval_ms: int, enable_controller: bool,
            controller_store_path: str, enable_elect_unclean_master: bool, metrics_exporter_type: str,
            metrics_prom_exporter_port: int, metrics_prom_exporter_host: str) -> None:
    """The name server: broker registry and topic routes (and, optionally, the replication controller)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = NamesrvConfig(host=host, port=port, broker_expiry_ms=broker_expiry_ms,
                           scan_interval_ms=scan_interval_ms, enable_controller=enable_controller,
                           controller_store_path=os.path.expanduser(controller_store_path),
                           enable_elect_unclean_master=enable_elect_unclean_master,
                           metrics_exporter_type=MetricsExporterType(metrics_exporter_type),
                           metrics_prom_exporter_port=metrics_prom_exporter_port,
                           metrics_prom_exporter_host=metrics_prom_exporter_host)
    try:
        asyncio.run(serve(config))
    except (BindError, ControllerStoreError, OSError) as e:
        raise click.ClickException(str(e)) from None


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
