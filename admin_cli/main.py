"""``mqadmin``: the click group, its global options, and the one rule for failures: exit 1 with exactly one
line on stderr (never a traceback, and click's usage errors too)."""

import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from admin_cli import (
    acl_commands,
    broker_commands,
    cluster_commands,
    group_commands,
    kv_commands,
    logical_queue_commands,
    message_commands,
    replication_commands,
    static_topic_commands,
    tiered_commands,
    topic_commands,
)
from admin_cli.context import DEFAULT_TIMEOUT_MS, TIMEOUT_HELP, TIMEOUT_TYPE, Settings

PROG = "mqadmin"
EXIT_FAILURE = 1


def one_line(text: str) -> str:
    return " ".join(text.split())


def fail(message: str, ctx: click.Context | None = None) -> NoReturn:
    prefix = ctx.command_path if ctx is not None else PROG
    click.echo(one_line(f"{prefix}: {message}") or PROG + ": failed", err=True)
    sys.exit(EXIT_FAILURE)


class AdminGroup(click.Group):
    """Runs click in non-standalone mode so that every failure goes through ``fail``."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> NoReturn:
        """``standalone_mode`` is ignored: click always runs without it here."""
        logging.getLogger().addHandler(logging.NullHandler())  # library warnings must not reach stderr
        try:
            rv = super().main(args=args, prog_name=prog_name or PROG, complete_var=complete_var, standalone_mode=False,
                              **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.ClickException as exc:
            fail(exc.format_message(), getattr(exc, "ctx", None))
        except click.Abort:
            fail("aborted")
        except UnicodeEncodeError:  # argv bytes that are not UTF-8 reach Python as lone surrogates
            fail("an argument is not valid UTF-8 text")
        except Exception as exc:  # a bug must still be one line, not a traceback
            fail(f"unexpected error: {type(exc).__name__}: {exc}")
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(PROG, cls=AdminGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namesrv-addr", "--namesrvAddr", "namesrv_addr", envvar="NAMESRV_ADDR",
              metavar="HOST:PORT[;HOST:PORT]", help="Name server address(es) [env NAMESRV_ADDR].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option("--timeout", "timeout_ms", type=TIMEOUT_TYPE, default=DEFAULT_TIMEOUT_MS, metavar="MS",
              help=TIMEOUT_HELP)
@click.option("--tls-ca", "tls_ca", envvar="ROCKETMQ_TLS_CA", metavar="PATH", default=None,
              help="Connect over TLS, trusting this CA file (PEM) [env ROCKETMQ_TLS_CA].")
@click.option("--access-key", "access_key", envvar="ROCKETMQ_ACCESS_KEY", metavar="AK", default=None,
              help="ACL access key (username) every call is signed with [env ROCKETMQ_ACCESS_KEY].")
@click.option("--secret-key", "secret_key", envvar="ROCKETMQ_SECRET_KEY", metavar="SK", default=None,
              help="ACL secret key (password) [env ROCKETMQ_SECRET_KEY].")
@click.pass_context
def cli(ctx: click.Context, namesrv_addr: str | None, as_json: bool, timeout_ms: int, tls_ca: str | None,
        access_key: str | None, secret_key: str | None) -> None:
    """Administer a RocketMQ-style cluster: topics, groups, brokers, messages."""
    ctx.obj = Settings(namesrv_addr=namesrv_addr, as_json=as_json, timeout_ms=timeout_ms, tls_ca=tls_ca or None)
    ctx.obj.credentials = acl_commands.credentials(access_key, secret_key)


for _module in (acl_commands, topic_commands, static_topic_commands, logical_queue_commands, cluster_commands,
                broker_commands, group_commands, message_commands, kv_commands, tiered_commands, replication_commands):
    for _command in _module.COMMANDS:
        cli.add_command(_command)

__all__ = ["cli"]

if __name__ == "__main__":
    cli()
