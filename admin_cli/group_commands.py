"""Consumer group commands: updateSubGroup, deleteSubGroup, consumerConnection, consumerProgress,
resetOffsetByTime."""

import logging

import click

from admin_cli.context import INT32_MAX, CommandFailed, as_json, command, open_admin, resolve_targets, target_options
from admin_cli.output import MISSING, Column, Row, Table, emit_tables, format_timestamp, slave_mark, slave_note, to_json
from admin_cli.timestamps import TIMESTAMP, UPSTREAM_PATTERN
from client.admin import Admin
from client.errors import MQClientError
from client.group_admin import GroupMember

log = logging.getLogger(__name__)

group_option = click.option("-g", "--groupName", "group", required=True, metavar="GROUP", help="Consumer group.")
QueueKey = tuple[str, str, int]  # topic, broker name, queue id


@command("updateSubGroup", "Create or update a subscription group on every master of a cluster or on named brokers.")
@group_option
@target_options
@click.option("-s", "--consumeEnable", "consume_enable", type=bool, default=True, show_default=True,
              help="Whether the group may consume.")
@click.option("-r", "--retryMaxTimes", "retry_max_times", type=click.IntRange(min=0, max=INT32_MAX), default=16,
              show_default=True, help="Redeliveries before a message goes to the dead-letter queue.")
@click.option("-o", "--consumeMessageOrderly", "orderly", type=bool, default=False, show_default=True,
              help="FIFO: POP consumers get a message group's messages one after another, in order.")
def update_sub_group(group: str, cluster: str | None, brokers: str | None, consume_enable: bool,
                     retry_max_times: int, orderly: bool) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    done = open_admin().update_subscription_group(group, cluster=cluster_name, brokers=broker_names,
                                                  consume_enable=consume_enable, retry_max_times=retry_max_times,
                                                  consume_message_orderly=orderly)
    rows = [{"group": group, "broker_name": b, "consume_enable": consume_enable, "retry_max_times": retry_max_times,
             "consume_message_orderly": orderly} for b in done]
    emit_tables(as_json(), Table([Column("group", "Group"), Column("broker_name", "Broker"),
                                  Column("consume_enable", "Consume Enable"),
                                  Column("retry_max_times", "Retry Max Times"),
                                  Column("consume_message_orderly", "Orderly")], rows))


# -- deleteSubGroup -----------------------------------------------------------------------------------------
def deletion_rows(kind: str, name: str, by_broker: dict[str, bool]) -> list[Row]:
    return [{"kind": kind, "name": name, "broker_name": b, "deleted": had} for b, had in by_broker.items()]


@command("deleteSubGroup", "Delete a subscription group from every master of a cluster or from named brokers; "
                           "-r also deletes its retry and dead-letter topics there.")
@group_option
@target_options
@click.option("-r", "--removeGroupTopics", "remove_topics", is_flag=True,
              help="Also delete the group's %RETRY% and %DLQ% topics on those brokers.")
def delete_sub_group(group: str, cluster: str | None, brokers: str | None, remove_topics: bool) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    admin = open_admin()
    rows = deletion_rows("group", group, admin.delete_subscription_group(group, cluster_name, broker_names))
    if remove_topics:
        for topic, by_broker in admin.delete_group_topics(group, cluster_name, broker_names).items():
            rows += deletion_rows("topic", topic, by_broker)
    if not any(r["deleted"] for r in rows):  # a typo in -g must not look like success
        where = ", ".join(r["broker_name"] for r in rows if r["kind"] == "group")
        raise CommandFailed(f"consumer group {group} does not exist on {where}"
                            + (" (nor its retry or dead-letter topic)" if remove_topics else ""))
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("kind", "Kind"), Column("name", "Name"),
                                  Column("deleted", "Result", lambda d: "deleted" if d else "not found")], rows))


# -- consumerConnection -------------------------------------------------------------------------------------
def member_row(member: GroupMember) -> Row:
    return {"client_id": member.client_id, "addr": member.addr, "consume_type": member.consume_type,
            "message_model": member.message_model, "orderly": member.orderly,
            "subscriptions": [{"topic": t, "expression": e} for t, e in member.subscriptions],
            "queues": [{"topic": q.topic, "broker_name": q.broker_name, "queue_id": q.queue_id}
                       for q in member.queues],
            "last_heartbeat": member.last_heartbeat_ms}


MEMBER_COLUMNS = [
    Column("client_id", "Client ID"), Column("addr", "Address"), Column("consume_type", "Consume Type"),
    Column("message_model", "Message Model"), Column("orderly", "Orderly"),
    Column("subscriptions", "Subscriptions", lambda subs: " ".join(f"{s['topic']}({s['expression']})"
                                                                  for s in subs) or MISSING),
    Column("queues", "Queues", lambda queues: str(len(queues))),
    Column("last_heartbeat", "Last Heartbeat", format_timestamp),
]
QUEUE_COLUMNS = [Column("client_id", "Client ID"), Column("topic", "Topic"), Column("broker_name", "Broker"),
                 Column("queue_id", "QID")]


@command("consumerConnection", "Show a consumer group's members as the brokers see them: client id, address, "
                               "consume type, message model, subscriptions, and the queues each consumes now.")
@group_option
def consumer_connection(group: str) -> None:
    members = open_admin().consumer_connection(group)
    if not members:  # upstream answers CONSUMER_NOT_ONLINE and the command fails: so does this one
        raise CommandFailed(f"consumer group {group} has no member online (no running consumer of the group "
                            "has a session with any broker)")
    rows = [member_row(m) for m in members]
    if as_json():
        click.echo(to_json(rows))
        return
    queue_rows = [{"client_id": r["client_id"], **q} for r in rows for q in r["queues"]]
    emit_tables(False, Table(MEMBER_COLUMNS, rows, title="Members"), Table(QUEUE_COLUMNS, queue_rows, title="Queues"))


# -- consumerProgress ---------------------------------------------------------------------------------------
def queue_owners(admin: Admin, group: str) -> dict[QueueKey, str]:
    """Who consumes each queue now (several ids, comma-separated, for a broadcasting group). Progress is still
    worth showing when the members cannot be listed, so that failure only leaves the column empty."""
    try:
        members = admin.consumer_connection(group)
    except MQClientError as exc:
        log.warning("consumer_connection_failed group=%s error=%s", group, exc)
        return {}
    owners: dict[QueueKey, list[str]] = {}
    for m in members:
        for q in m.queues:
            owners.setdefault((q.topic, q.broker_name, q.queue_id), []).append(m.client_id)
    return {key: ",".join(sorted(ids)) for key, ids in owners.items()}


@command("consumerProgress", "Show a group's offsets per queue against the brokers' max offsets, the member "
                             "consuming each queue now, and the total lag.")
@group_option
@click.option("-t", "--topic", metavar="TOPIC", help="Only this topic.")
def consumer_progress(group: str, topic: str | None) -> None:
    admin = open_admin()
    progress = admin.consumer_progress(group, topic)
    owners = queue_owners(admin, group)
    rows = [{"topic": p.topic, "broker_name": p.broker_name, "queue_id": p.queue_id,
             "broker_offset": p.broker_offset, "consumer_offset": p.consumer_offset,
             "client_id": owners.get((p.topic, p.broker_name, p.queue_id), ""), "diff": p.diff,
             "last_timestamp": p.last_timestamp, **slave_mark(p.from_slave)} for p in progress]
    total = sum(p.diff for p in progress)
    from_slaves = {p.broker_name: p.broker_id for p in progress if p.from_slave}
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("broker_offset", "Broker Offset"),
                                  Column("consumer_offset", "Consumer Offset"),
                                  Column("client_id", "Client ID", lambda cid: cid or MISSING), Column("diff", "Diff"),
                                  Column("last_timestamp", "Last Time", format_timestamp)],
                                 rows, footer=["", f"Diff Total: {total}", *slave_note(from_slaves)]))


# -- resetOffsetByTime --------------------------------------------------------------------------------------
@command("resetOffsetByTime", "Set a group's committed offset on every queue of a topic to the first message "
                              "stored at or after a time; running members restart those queues there.")
@group_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-s", "--timestamp", "timestamp", required=True, type=TIMESTAMP, metavar="TIMESTAMP",
              help=f"Epoch milliseconds, 'now', or {UPSTREAM_PATTERN} (local time).")
def reset_offset_by_time(group: str, topic: str, timestamp: int) -> None:
    offsets = open_admin().reset_offset_by_time(group, topic, timestamp)
    rows = [{"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": offset}
            for mq, offset in sorted(offsets.items())]
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("offset", "Offset")], rows,
                                 footer=["", f"Reset {group} on {topic} to {format_timestamp(timestamp)} "
                                             f"({timestamp} ms)"]))


COMMANDS = [update_sub_group, delete_sub_group, consumer_connection, consumer_progress, reset_offset_by_time]
