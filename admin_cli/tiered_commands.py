"""Tiered storage commands: tieredStatus."""

import click

from admin_cli.context import as_json, command, open_admin
from admin_cli.output import Column, Row, Table, emit_tables
from proto import tiered_pb2

TIERED_STATUS_COLUMNS = [
    Column("broker_name", "Broker"), Column("queue_id", "QID"),
    Column("local_min_offset", "Local Min"), Column("local_max_offset", "Local Max"),
    Column("tiered_min_offset", "Tiered Min"), Column("tiered_max_offset", "Tiered Max"),
    Column("commit_log_segments", "CL Segs"), Column("consume_queue_segments", "CQ Segs"),
    Column("tiered_bytes", "Bytes"), Column("upload_lag", "Upload Lag"),
]


def _tier_offset(value: int) -> int | None:
    """The broker answers -1 for a queue of which nothing reached the tier yet: no offset (``-``, JSON null)."""
    return value if value >= 0 else None


def tiered_status_rows(responses: list[tiered_pb2.TieredStatusResponse]) -> list[Row]:
    return [{"broker_name": r.broker_name, "queue_id": q.queue_id, "local_min_offset": q.local_min_offset,
             "local_max_offset": q.local_max_offset, "tiered_min_offset": _tier_offset(q.tiered_min_offset),
             "tiered_max_offset": _tier_offset(q.tiered_max_offset), "commit_log_segments": q.commit_log_segments,
             "consume_queue_segments": q.consume_queue_segments, "tiered_bytes": q.tiered_bytes,
             "upload_lag": q.upload_lag, "storage_level": r.storage_level}
            for r in sorted(responses, key=lambda r: r.broker_name) for q in sorted(r.queues, key=lambda q: q.queue_id)]


@command("tieredStatus", "Show each queue of a topic in the local store and in the tier: min and max offsets, "
                         "tiered segments and bytes, and how many messages still wait for upload.")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
def tiered_status(topic: str) -> None:
    responses = open_admin().tiered_status(topic)
    footer = [""] + [f"{r.broker_name}: tieredStorageLevel={r.storage_level}"
                     for r in sorted(responses, key=lambda r: r.broker_name)] if responses else []
    emit_tables(as_json(), Table(TIERED_STATUS_COLUMNS, tiered_status_rows(responses), footer=footer))


COMMANDS = [tiered_status]
