"""What the name server's and the proxy's command lines share: the metrics and TLS server options (upstream's
key names in their help) and the entry point that turns click's outcomes into exit codes and one stderr line."""

from collections.abc import Callable, Sequence
from typing import Any

import click

from common.metrics import MetricsExporterType

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

_METRICS_OPTIONS = [
    click.option("--metrics-exporter-type", "metrics_exporter_type", type=click.Choice(list(MetricsExporterType)),
                 default=MetricsExporterType.DISABLE.value, show_default=True,
                 help="PROM: Prometheus metrics on --metrics-prom-exporter-port (metricsExporterType)."),
    click.option("--metrics-prom-exporter-port", type=click.IntRange(0, 65535), default=5557, show_default=True,
                 help="Port of /metrics; 0 picks a free one (logged as metrics_exporter_started)."),
    click.option("--metrics-prom-exporter-host", default="", help="Address of /metrics (default: --host)."),
]
_TLS_SERVER_OPTIONS = [
    click.option("--tls-enable", is_flag=True, help="Serve TLS only on the port (tlsEnable); needs --tls-cert and "
                 "--tls-key."),
    click.option("--tls-cert", default="", metavar="PATH", help="PEM server certificate chain (tlsServerCertPath)."),
    click.option("--tls-key", default="", metavar="PATH", help="PEM server private key (tlsServerKeyPath)."),
]


def _all(options: Sequence[Callable[[Any], Any]]) -> Decorator:
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func
    return apply


metrics_options = _all(_METRICS_OPTIONS)
tls_server_options = _all(_TLS_SERVER_OPTIONS)


def run_command(command: click.Command, argv: list[str] | None, prog: str) -> int:
    """A daemon's console entry point. Errors are one line on stderr, never a traceback: 2 for bad flags, 1
    otherwise."""
    try:
        result = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.UsageError as e:
        click.echo(f"{prog}: error: {e.format_message()} (see {prog} --help)", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"{prog}: error: {e.format_message()}", err=True)
        return e.exit_code
    except click.Abort:
        return 130
    return result if isinstance(result, int) else 0
