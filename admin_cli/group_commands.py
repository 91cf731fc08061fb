"""Consumer group commands: updateSubGroup, deleteSubGroup, consumerConnection, consumerProgress,
resetOffsetByTime."""

import logging
from collections.abc import Iterable

import click

from admin_cli.context import INT32_MAX, CommandFailed, as_json, command, open_admin, resolve_targets, target_options
from admin_cli.output import MISSING, Column, Row, Table, emit_tables, format_timestamp, slave_mark, slave_note, to_json
from admin_cli.timestamps import TIMESTAMP, UPSTREAM_PATTERN
from client.admin import Admin, QueueProgress
from client.errors import MQClientError
from client.group_admin import GroupMember
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from common.statictopic.mapping_info_checks import field_fault
from common.subscription import expression_selects

log = logging.getLogger(__name__)

group_option = click.option("-g", "--groupName", "group", required=True, metavar="GROUP", help="Consumer group.")
QueueKey = tuple[str, str, int]  # topic, broker name, queue id
PhysicalQueue = tuple[str, int]  # broker name, queue id
NOT_SUBSCRIBED = "not subscribed"


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


def topic_variants(members: Iterable[GroupMember], topic: str) -> dict[str, list[str]]:
    """How the members subscribe ``topic``: expression as first written (or NOT_SUBSCRIBED) -> client ids."""
    variants: dict[tuple[bool, frozenset[str] | str | None], tuple[str, list[str]]] = {}
    for m in members:
        expression = dict(m.subscriptions).get(topic)
        key = (expression is not None, None if expression is None else expression_selects(expression))
        text = NOT_SUBSCRIBED if expression is None else expression
        variants.setdefault(key, (text, []))[1].append(m.client_id)
    return {text: sorted(ids) for text, ids in variants.values()}


def subscription_note(members: list[GroupMember], topic: str | None = None) -> list[str]:
    """Footer lines when the group's clustering members subscribe differently (all topics, or only ``topic``).
    Each member allocates a topic's queues over the whole group, so a member given queues of a topic it does not
    subscribe, or filtering out tags another member wants, leaves messages unconsumed; upstream's consumerStatus
    warns about the same."""
    clustering = [m for m in members if m.message_model == "CLUSTERING"]
    subscribed = {t for m in clustering for t, _ in m.subscriptions}
    parts = []
    for t in sorted(subscribed if topic is None else subscribed & {topic}):
        variants = topic_variants(clustering, t)
        if len(variants) > 1:
            parts.append(f"{t}: " + ", ".join(f"{text} on {' '.join(ids)}" for text, ids in sorted(variants.items())))
    if not parts:
        return []
    return ["", f"Subscriptions differ between members: {'; '.join(parts)}",
            "(queues are allocated over every member: what a member does not subscribe or filters out stays "
            "unconsumed)"]


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
    emit_tables(False, Table(MEMBER_COLUMNS, rows, title="Members"),
                Table(QUEUE_COLUMNS, queue_rows, title="Queues", footer=subscription_note(members)))


# -- consumerProgress ---------------------------------------------------------------------------------------
def group_members(admin: Admin, group: str) -> list[GroupMember]:
    """The group's members; none when they cannot be listed: progress is still worth showing, that failure only
    leaves the Client ID column empty."""
    try:
        return admin.consumer_connection(group)
    except MQClientError as exc:
        log.warning("consumer_connection_failed group=%s error=%s", group, exc)
        return []


def queue_owners(members: list[GroupMember]) -> dict[QueueKey, str]:
    """Who consumes each queue now (several ids, comma-separated, for a broadcasting group)."""
    owners: dict[QueueKey, list[str]] = {}
    for m in members:
        for q in m.queues:
            owners.setdefault((q.topic, q.broker_name, q.queue_id), []).append(m.client_id)
    return {key: ",".join(sorted(ids)) for key, ids in owners.items()}


def logic_queue_ids(admin: Admin, topic: str) -> dict[PhysicalQueue, int]:
    """(broker, physical queue id) -> logic queue id of a static topic, for the logic queues each broker leads
    (the route's mapping infos; one failing the consistency rules is skipped, as the SDK skips it)."""
    try:
        route = admin.topic_route(topic)
    except MQClientError as exc:
        log.warning("static_mapping_unavailable topic=%s error=%s", topic, exc)
        return {}
    return {(bname, physical_id): logic_id for bname, info in route.topic_queue_mapping_by_broker.items()
            if field_fault(info, bname) is None for logic_id, physical_id in info.curr_id_map.items()}


def static_logic_ids(admin: Admin, owners: dict[QueueKey, str]) -> dict[str, dict[PhysicalQueue, int]]:
    """Per static topic some member consumes, its physical-to-logic queue ids. Members report a static topic's
    logic queues while the brokers report physical ones: only such topics cost a route lookup."""
    topics = {t for t, broker_name, _ in owners if broker_name == LOGICAL_QUEUE_MOCK_BROKER_NAME}
    return {t: logic_queue_ids(admin, t) for t in sorted(topics)}


def row_owner(p: QueueProgress, owners: dict[QueueKey, str], logic_ids: dict[str, dict[PhysicalQueue, int]]) -> str:
    """The member consuming a progress row's queue: for a static topic, the one holding the logic queue that the
    row's physical queue serves."""
    logic_id = logic_ids.get(p.topic, {}).get((p.broker_name, p.queue_id))
    if logic_id is not None:
        return owners.get((p.topic, LOGICAL_QUEUE_MOCK_BROKER_NAME, logic_id), "")
    return owners.get((p.topic, p.broker_name, p.queue_id), "")


@command("consumerProgress", "Show a group's offsets per queue against the brokers' max offsets, the member "
                             "consuming each queue now, and the total lag.")
@group_option
@click.option("-t", "--topic", metavar="TOPIC", help="Only this topic.")
def consumer_progress(group: str, topic: str | None) -> None:
    admin = open_admin()
    unreachable: dict[str, str] = {}  # shown below the rows the others answered
    progress = admin.consumer_progress(group, topic, unreachable)
    members = group_members(admin, group)
    owners = queue_owners(members)
    logic_ids = static_logic_ids(admin, owners)
    rows = [{"topic": p.topic, "broker_name": p.broker_name, "queue_id": p.queue_id,
             "broker_offset": p.broker_offset, "consumer_offset": p.consumer_offset,
             "client_id": row_owner(p, owners, logic_ids), "diff": p.diff,
             "last_timestamp": p.last_timestamp, **slave_mark(p.from_slave)} for p in progress]
    if as_json():  # (the footer is the table's: a script reading the rows is told on stderr)
        for name, why in sorted(unreachable.items()):
            click.echo(f"mqadmin consumerProgress: broker {name} unreachable (its queues are not shown): {why}",
                       err=True)
    total = sum(p.diff for p in progress)
    from_slaves = {p.broker_name: p.broker_id for p in progress if p.from_slave}
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("broker_offset", "Broker Offset"),
                                  Column("consumer_offset", "Consumer Offset"),
                                  Column("client_id", "Client ID", lambda cid: cid or MISSING), Column("diff", "Diff"),
                                  Column("last_timestamp", "Last Time", format_timestamp)],
                                 rows, footer=["", f"Diff Total: {total}", *slave_note(from_slaves),
                                               *subscription_note(members, topic),
                                               *(f"broker {name} unreachable (its queues are not shown): {why}"
                                                 for name, why in sorted(unreachable.items()))]))


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
