"""What every command shares: global settings, the Admin it talks through, common flags, error handling."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from client.admin import Admin
from client.errors import MQClientError
from common.address import check_address

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_TIMEOUT_MS = 10_000
INT32_MAX = (1 << 31) - 1  # the largest value a proto int32 field takes (queue ids, counts)
INT64_MAX = (1 << 63) - 1  # int64 fields (offsets, broker ids)
NO_NAMESRV = "no name server address: pass -n HOST:PORT or set NAMESRV_ADDR"


@dataclass(slots=True)
class Settings:
    namesrv_addr: str | None = None
    as_json: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    tls_ca: str | None = None  # --tls-ca / ROCKETMQ_TLS_CA: connect over TLS, trusting this CA file
    # --access-key/--secret-key (ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY): ACL credentials every call is signed with
    credentials: tuple[str, str] | None = None


class CommandFailed(click.ClickException):
    """A command could not do what was asked; ``ctx`` names the command in the one-line message."""

    def __init__(self, message: str, ctx: click.Context | None = None) -> None:
        super().__init__(message)
        self.ctx = ctx if ctx is not None else click.get_current_context(silent=True)


class AdminCommand(click.Command):
    """A subcommand whose SDK errors become one-line failures naming the command."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MQClientError as exc:
            raise CommandFailed(str(exc), ctx) from None
        except click.UsageError as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise


def settings(ctx: click.Context | None = None) -> Settings:
    ctx = ctx or click.get_current_context()
    return ctx.ensure_object(Settings)


def as_json() -> bool:
    return settings().as_json


def open_admin() -> Admin:
    """The Admin of this invocation, closed when the command ends."""
    ctx = click.get_current_context()
    addr = (settings(ctx).namesrv_addr or "").strip()
    if not addr:
        raise CommandFailed(NO_NAMESRV, ctx)
    return ctx.with_resource(Admin(addr, rpc_timeout_ms=settings(ctx).timeout_ms, tls_ca=settings(ctx).tls_ca,
                                   credentials=settings(ctx).credentials))


def open_broker_admin(broker_addr: str) -> Admin:
    """An Admin for a command that names a broker by address (no name server needed)."""
    ctx = click.get_current_context()
    broker_addr = broker_addr.strip()
    if not broker_addr:
        raise click.UsageError("-b needs a broker address HOST:PORT")
    try:
        check_address(broker_addr)
    except ValueError as exc:
        raise click.UsageError(f"-b {exc}") from None
    addr = (settings(ctx).namesrv_addr or "").strip() or broker_addr
    return ctx.with_resource(Admin(addr, rpc_timeout_ms=settings(ctx).timeout_ms, tls_ca=settings(ctx).tls_ca,
                                   credentials=settings(ctx).credentials))


def timeout_ms() -> int:
    return settings().timeout_ms


# -- flags every command takes: -n and --json also after the subcommand, as RocketMQ's mqadmin takes -n ------
def _set_namesrv(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        settings(ctx).namesrv_addr = value


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        settings(ctx).as_json = True


def _set_timeout(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    if value is not None:
        settings(ctx).timeout_ms = value


TIMEOUT_TYPE = click.IntRange(1, 3_600_000)
TIMEOUT_HELP = "Milliseconds each call may take (default 10000); an address that does not answer fails after it."


def common_options(func: F) -> F:
    func = click.option("--timeout", "timeout_ms", type=TIMEOUT_TYPE, metavar="MS", expose_value=False,
                        callback=_set_timeout, help=TIMEOUT_HELP)(func)
    func = click.option("--json", "as_json", is_flag=True, expose_value=False, callback=_set_json,
                        help="Print one JSON document instead of a table.")(func)
    return click.option("-n", "--namesrv-addr", "--namesrvAddr", "namesrv_addr", metavar="HOST:PORT[;HOST:PORT]",
                        expose_value=False, callback=_set_namesrv,
                        help="Name server address(es); overrides the global -n.")(func)


def command(name: str, help_text: str) -> Callable[[F], click.Command]:
    """Declare an mqadmin subcommand: AdminCommand error handling plus -n and --json."""

    def decorate(func: F) -> click.Command:
        return click.command(name, cls=AdminCommand, help=help_text)(common_options(func))

    return decorate


# -- -c CLUSTER | -b BROKER[,BROKER] ------------------------------------------------------------------------
def target_options(func: F) -> F:
    func = click.option("-b", "--brokerName", "brokers", metavar="BROKER[,BROKER]",
                        help="Comma-separated broker names (exclusive with -c).")(func)
    return click.option("-c", "--clusterName", "cluster", metavar="CLUSTER",
                        help="Every master of this cluster (exclusive with -b).")(func)


def parse_broker_list(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        raise click.UsageError(f"-b needs at least one broker name, got {raw!r}")
    return names


def resolve_targets(cluster: str | None, brokers: str | None) -> tuple[str | None, list[str] | None]:
    """Exactly one of a cluster or a broker list."""
    if (cluster is None) == (brokers is None):
        raise click.UsageError("give exactly one of -c CLUSTER or -b BROKER[,BROKER]")
    if cluster is not None:
        if not cluster.strip():
            raise click.UsageError("-c needs a cluster name")
        return cluster.strip(), None
    assert brokers is not None
    return None, parse_broker_list(brokers)
