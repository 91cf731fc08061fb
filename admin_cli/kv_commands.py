"""KV store commands: kvInit, kvPut, kvGet, kvDelete, kvScan, kvCas, kvExport, kvImport.

Keys and values are UTF-8 text on the command line (a value can also be read from a file with ``--value-file``);
a stored value that is not valid UTF-8 is printed as Python's repr of the bytes (``b'\\xff...'``)."""

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import click
from google.protobuf.message import DecodeError

from admin_cli.context import (
    DEFAULT_TIMEOUT_MS,
    NO_NAMESRV,
    CommandFailed,
    as_json,
    command,
    open_admin,
    resolve_targets,
    settings,
    target_options,
)
from admin_cli.output import Column, Table, emit_record, emit_tables, to_json
from admin_cli.static_topic_commands import BROKER_COLUMNS, LEADER_COLUMNS, broker_rows, leader_rows
from client.kv_client import KVClient
from client.kv_snapshot_file import read_snapshot, write_snapshot
from common.kv_shard import DEFAULT_KV_SHARDS, KV_TOPIC, MAX_SCAN_LIMIT, MAX_VALUE_BYTES
from proto import kv_pb2


def open_kv() -> KVClient:
    """The KVClient of this invocation, closed when the command ends."""
    ctx = click.get_current_context()
    addr = (settings(ctx).namesrv_addr or "").strip()
    if not addr:
        raise CommandFailed(NO_NAMESRV, ctx)
    t = settings(ctx).timeout_ms
    retry_ms = 15_000 if t == DEFAULT_TIMEOUT_MS else t
    return ctx.with_resource(KVClient(addr, rpc_timeout_ms=t, retry_timeout_ms=retry_ms, tls_ca=settings(ctx).tls_ca,
                                      credentials=settings(ctx).credentials))


def text(value: bytes | None) -> str | None:
    """A key or value for printing: its UTF-8 text, else Python's repr of the bytes."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return repr(value)


def utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates from undecodable argv bytes
        raise click.BadParameter(f"{what} is not valid UTF-8 text ({exc.reason})") from None


def check_positive(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    if value <= 0:
        raise click.BadParameter(f"the number of shards must be positive, got {value}")
    return value


def check_limit(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    if not 1 <= value <= MAX_SCAN_LIMIT:
        raise click.BadParameter(f"scan limit {value} is outside 1..{MAX_SCAN_LIMIT}")
    return value


def check_shard(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    if value < 0:
        raise click.BadParameter(f"a shard number is 0 or more, got {value}")
    return value


key_option = click.option("-k", "--key", "key", required=True, metavar="KEY", help="The key (UTF-8 text).")


def value_options(command: Callable[..., None]) -> Callable[..., None]:
    """``-v VALUE`` or ``--value-file FILE``: a value too large for a command line (about 128 KiB on Linux), or not
    UTF-8 text, is read from a file (``-`` for stdin) as its bytes are."""
    command = click.option("--value-file", "value_file", type=click.File("rb"), metavar="FILE",
                           help="Read the value from FILE ('-' for stdin), bytes as they are.")(command)
    return click.option("-v", "--value", "value", metavar="VALUE", help="The value (UTF-8 text).")(command)


def value_bytes(value: str | None, value_file: BinaryIO | None) -> bytes:
    if (value is None) == (value_file is None):
        raise click.UsageError("give exactly one of -v VALUE or --value-file FILE")
    if value_file is not None:
        data = value_file.read(MAX_VALUE_BYTES + 1)
        if len(data) > MAX_VALUE_BYTES:
            raise click.BadParameter(f"{value_file.name} holds more than {MAX_VALUE_BYTES} bytes (a value is at most "
                                     "4 MiB)", param_hint="--value-file")
        return data
    return utf8(value or "", "value")
file_option = click.option("-f", "--file", "file", required=True, metavar="FILE",
                           type=click.Path(dir_okay=False, path_type=Path), help="The snapshot file.")


# -- kvInit -------------------------------------------------------------------------------------------------
@command("kvInit", f"Create the KV store's shards (the static topic {KV_TOPIC}) on every master of a cluster or "
                   "on the named brokers, which need kvEnable=true. The number of shards is fixed once created: "
                   "running it again with another number fails.")
@target_options
@click.option("-qn", "--shards", "--totalQueueNum", "shards", type=int, default=DEFAULT_KV_SHARDS, show_default=True,
              callback=check_positive, metavar="N", help="The number of shards.")
def kv_init(cluster: str | None, brokers: str | None, shards: int) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    result = open_admin().kv_init(shards, cluster=cluster_name, brokers=broker_names)
    if result is None:
        message = f"KV store {KV_TOPIC} already has {shards} shards: nothing to do"
        click.echo(to_json({"result": "unchanged", "shards": shards}) if as_json() else message)
        return
    emit_tables(as_json(),
                Table(LEADER_COLUMNS, leader_rows(KV_TOPIC, result.epoch, result.leaders()), name="logic_queues",
                      title=f"KV store {KV_TOPIC}: {result.total_queues} shards, epoch {result.epoch}"),
                Table(BROKER_COLUMNS, broker_rows(result.details), name="brokers", title="Brokers"))


# -- kvPut / kvGet / kvDelete -------------------------------------------------------------------------------
@command("kvPut", "Set a key's value.")
@key_option
@value_options
def kv_put(key: str, value: str | None, value_file: BinaryIO | None) -> None:
    open_kv().put(utf8(key, "key"), value_bytes(value, value_file))
    click.echo(to_json({"key": key, "result": "ok"}) if as_json() else "OK")


@command("kvGet", "Print a key's value (exit 1 when the key is absent).")
@key_option
def kv_get(key: str) -> None:
    value = open_kv().get(utf8(key, "key"))
    if value is None:
        raise CommandFailed(f"key {key} not found")
    if as_json():
        click.echo(to_json({"key": key, "value": text(value)}))
    else:
        click.echo(text(value))


@command("kvDelete", "Delete a key (deleting an absent key succeeds).")
@key_option
def kv_delete(key: str) -> None:
    open_kv().delete(utf8(key, "key"))
    click.echo(to_json({"key": key, "result": "deleted"}) if as_json() else "OK")


# -- kvScan -------------------------------------------------------------------------------------------------
SCAN_COLUMNS = [Column("key", "Key"), Column("value", "Value")]


@command("kvScan", "List keys with a prefix and their values, in key order.")
@click.option("-p", "--prefix", "prefix", required=True, metavar="PREFIX", help="Key prefix ('' for every key).")
@click.option("--limit", type=int, default=100, show_default=True, callback=check_limit, metavar="N",
              help=f"At most N entries (1..{MAX_SCAN_LIMIT}).")
@click.option("--start-after", "start_after", default="", metavar="KEY",
              help="Only keys after KEY (pass the last key printed to page on).")
def kv_scan(prefix: str, limit: int, start_after: str) -> None:
    entries = open_kv().scan(utf8(prefix, "prefix"), limit=limit, start_after=utf8(start_after, "--start-after"))
    emit_tables(as_json(), Table(SCAN_COLUMNS, [{"key": text(k), "value": text(v)} for k, v in entries]))


# -- kvCas --------------------------------------------------------------------------------------------------
@command("kvCas", "Compare-and-set: set the value if the key holds --expect (or is absent, with --expect-absent). "
                  "Prints 'applied' and exits 0, or prints 'not applied: current value is X' ('' when empty; "
                  "'not applied: the key is absent' when absent) on stderr and exits 1, so that scripts can test "
                  "the exit code.")
@key_option
@click.option("--expect", "expect", metavar="EXPECTED", help="The value the key must hold now.")
@click.option("--expect-absent", "expect_absent", is_flag=True, help="The key must be absent now.")
@value_options
def kv_cas(key: str, expect: str | None, expect_absent: bool, value: str | None, value_file: BinaryIO | None) -> None:
    if (expect is None) == (not expect_absent):
        raise click.UsageError("give exactly one of --expect EXPECTED or --expect-absent")
    expected = None if expect_absent else utf8(expect or "", "--expect")
    result = open_kv().cas(utf8(key, "key"), expected, value_bytes(value, value_file))
    if not result.applied:
        raise CommandFailed(f"not applied: {_current(result.current)}")
    click.echo(to_json({"key": key, "applied": True, "value": text(result.current)}) if as_json() else "applied")


def _current(value: bytes | None) -> str:
    """What a CAS found, for its refusal: an absent key and an empty value (shown as '') must not look alike."""
    if value is None:
        return "the key is absent"
    return f"current value is {text(value) or repr('')}"


# -- kvExport / kvImport ------------------------------------------------------------------------------------
SNAPSHOT_COLUMNS = [Column("file", "File"), Column("shard", "Shard"), Column("total_shards", "Total Shards"),
                    Column("broker_name", "Source Broker"), Column("commit_log_offset", "CommitLog Offset"),
                    Column("entries", "Entries")]


def snapshot_row(file: Path, header: kv_pb2.KvSnapshotHeader, entries: int) -> dict:
    return {"file": str(file), "shard": header.shard, "total_shards": header.total_shards,
            "broker_name": header.broker_name, "commit_log_offset": header.commit_log_offset, "entries": entries}


@command("kvExport", "Write a consistent snapshot of one shard (from its leader) to a file.")
@click.option("--shard", "shard", type=int, required=True, callback=check_shard, metavar="N", help="Shard number.")
@file_option
def kv_export(shard: int, file: Path) -> None:
    kv = open_kv()
    total = kv.shards()
    if shard >= total:
        raise CommandFailed(f"shard {shard} does not exist: the KV store has shards 0..{total - 1}")
    chunks = kv.export_snapshot(shard)
    if not chunks or not chunks[0].HasField("header"):
        raise CommandFailed(f"the snapshot of shard {shard} came without a header")
    try:
        entries = write_snapshot(file, chunks)
    except OSError as exc:
        raise CommandFailed(f"cannot write {file}: {exc.strerror or exc}") from None
    emit_record(as_json(), SNAPSHOT_COLUMNS, snapshot_row(file, chunks[0].header, entries))


@command("kvImport", "Load a shard snapshot file into the same shard of this KV store (its leader must hold "
                     "nothing in that shard, and the store must have the same number of shards).")
@file_option
def kv_import(file: Path) -> None:
    try:
        chunks = read_snapshot(file)
    except DecodeError:
        raise CommandFailed(f"{file} is not a valid KV snapshot (a chunk does not decode)") from None
    header = chunks[0].header
    kv = open_kv()
    total = kv.shards()
    if header.total_shards and header.total_shards != total:
        raise CommandFailed(f"{file} is a snapshot of a KV store with {header.total_shards} shards; this one has "
                            f"{total} (keys hash over the number of shards)")
    if not 0 <= header.shard < total:
        raise CommandFailed(f"{file} holds shard {header.shard}, which does not exist here (0..{total - 1})")
    imported = kv.import_snapshot(chunks)
    emit_record(as_json(), SNAPSHOT_COLUMNS, snapshot_row(file, header, imported))


COMMANDS = [kv_init, kv_put, kv_get, kv_delete, kv_scan, kv_cas, kv_export, kv_import]
