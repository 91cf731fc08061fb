"""Topic commands: updateTopic, deleteTopic, topicList, topicRoute, topicStatus."""

import dataclasses

import click

from admin_cli.context import as_json, command, open_admin, resolve_targets, target_options
from admin_cli.output import (
    Column,
    Row,
    Table,
    emit_tables,
    format_timestamp,
    render_table,
    slave_mark,
    slave_note,
    to_json,
)
from client.errors import MQClientError
from client.static_topic_admin import StaticTopicStatus
from common.perm import PERM_READ, PERM_READ_WRITE, PERM_WRITE, perm_to_string
from common.response_code import ResponseCode
from proto import common_pb2

VALID_PERMS = (PERM_WRITE, PERM_READ, PERM_READ_WRITE)
QUEUE_NUMS = click.IntRange(min=1, max=1024)


def perm_column(key: str = "perm") -> Column:
    return Column(key, "Perm", lambda p: f"{perm_to_string(p)} ({p})")


def check_perm(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    if value not in VALID_PERMS:
        raise click.BadParameter(f"{value} is not one of 2 (W), 4 (R), 6 (RW)")
    return value


topic_option = click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")


# -- updateTopic --------------------------------------------------------------------------------------------
@command("updateTopic", "Create or update a topic on every master of a cluster or on the named brokers.")
@topic_option
@target_options
@click.option("-r", "--readQueueNums", "read_queue_nums", type=QUEUE_NUMS, default=8, show_default=True,
              help="Read queues per broker.")
@click.option("-w", "--writeQueueNums", "write_queue_nums", type=QUEUE_NUMS, default=8, show_default=True,
              help="Write queues per broker.")
@click.option("-p", "--perm", type=int, default=PERM_READ_WRITE, show_default=True, callback=check_perm,
              help="Permission: 2 (W), 4 (R) or 6 (RW).")
@click.option("--static", "static", is_flag=True,
              help="Create a static topic with -qn logic queues in one step (-r, -w and -p do not apply).")
@click.option("-qn", "--totalQueueNum", "queue_num", type=click.IntRange(min=1), metavar="N",
              help="With --static: the number of logic queues.")
def update_topic(topic: str, cluster: str | None, brokers: str | None, read_queue_nums: int,
                 write_queue_nums: int, perm: int, static: bool, queue_num: int | None) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    if static != (queue_num is not None):
        raise click.UsageError("--static and -qn N go together: a static topic with N logic queues")
    if static:
        from admin_cli.static_topic_commands import emit_static_update  # it imports this module
        assert queue_num is not None
        emit_static_update(topic, open_admin().update_static_topic(topic, queue_num, cluster=cluster_name,
                                                                   brokers=broker_names))
        return
    done = open_admin().create_topic(topic, cluster=cluster_name, brokers=broker_names,
                                     read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm)
    rows = [{"topic": topic, "broker_name": b, "read_queue_nums": read_queue_nums,
             "write_queue_nums": write_queue_nums, "perm": perm} for b in done]
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("broker_name", "Broker"),
                                  Column("read_queue_nums", "Read Queues"),
                                  Column("write_queue_nums", "Write Queues"), perm_column()], rows))


# -- deleteTopic --------------------------------------------------------------------------------------------
@command("deleteTopic", "Delete a topic from every broker of a cluster and from the name servers.")
@topic_option
@click.option("-c", "--clusterName", "cluster", required=True, metavar="CLUSTER", help="Cluster name.")
def delete_topic(topic: str, cluster: str) -> None:
    deleted = open_admin().delete_topic(topic, cluster)
    rows = [{"topic": topic, "cluster": cluster, "broker_name": b} for b in deleted]
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("cluster", "Cluster"),
                                  Column("broker_name", "Deleted From")], rows))


# -- topicList ----------------------------------------------------------------------------------------------
@command("topicList", "List every topic the name servers know.")
def topic_list() -> None:
    rows = [{"topic": t} for t in open_admin().topic_list()]
    emit_tables(as_json(), Table([Column("topic", "Topic")], rows))


# -- topicRoute ---------------------------------------------------------------------------------------------
def broker_rows(route: common_pb2.TopicRouteData) -> list[Row]:
    return [{"cluster": bd.cluster, "broker_name": bd.broker_name, "broker_id": bid, "addr": bd.broker_addrs[bid]}
            for bd in sorted(route.broker_datas, key=lambda b: b.broker_name) for bid in sorted(bd.broker_addrs)]


def queue_rows(route: common_pb2.TopicRouteData) -> list[Row]:
    return [{"broker_name": qd.broker_name, "read_queue_nums": qd.read_queue_nums,
             "write_queue_nums": qd.write_queue_nums, "perm": qd.perm, "topic_sys_flag": qd.topic_sys_flag}
            for qd in sorted(route.queue_datas, key=lambda q: q.broker_name)]


def mapping_rows(route: common_pb2.TopicRouteData) -> list[Row]:
    return [{"broker_name": name, "bname": info.bname, "scope": info.scope, "total_queues": info.total_queues,
             "epoch": info.epoch, "dirty": info.dirty,
             "logic_to_physical": {str(k): info.curr_id_map[k] for k in sorted(info.curr_id_map)}}
            for name, info in sorted(route.topic_queue_mapping_by_broker.items())]


def render_id_map(id_map: dict[str, int] | None) -> str:
    return ",".join(f"{k}->{v}" for k, v in (id_map or {}).items()) or "-"


@command("topicRoute", "Show a topic's route: brokers, queues and (static topics) the queue mapping.")
@topic_option
def topic_route(topic: str) -> None:
    route = open_admin().topic_route(topic)
    tables = [
        Table([Column("cluster", "Cluster"), Column("broker_name", "Broker"), Column("broker_id", "BID"),
               Column("addr", "Address")], broker_rows(route), name="broker_datas", title="Brokers"),
        Table([Column("broker_name", "Broker"), Column("read_queue_nums", "Read Queues"),
               Column("write_queue_nums", "Write Queues"), perm_column(), Column("topic_sys_flag", "Sys Flag")],
              queue_rows(route), name="queue_datas", title="Queues"),
    ]
    mappings = mapping_rows(route)
    mapping_table = Table([Column("broker_name", "Broker"), Column("total_queues", "Total Queues"),
                           Column("epoch", "Epoch"), Column("scope", "Scope"), Column("dirty", "Dirty"),
                           Column("logic_to_physical", "Logic->Physical", render_id_map)],
                          mappings, name="topic_queue_mappings", title="Static topic mapping")
    if mappings or as_json():  # JSON always carries the key, humans see the section only when it says something
        tables.append(mapping_table)
    emit_tables(as_json(), *tables)


# -- topicStatus --------------------------------------------------------------------------------------------
STATIC_STATUS_COLUMNS = [
    Column("logic_id", "Logic QID"), Column("gen", "Gen"), Column("broker_name", "Broker"),
    Column("queue_id", "Physical QID"), Column("logic_offset", "Logic Offset"), Column("end_offset", "End"),
    Column("min_offset", "Min Offset"), Column("max_offset", "Max Offset"),
    Column("last_update_timestamp", "Last Updated", format_timestamp),
    Column("leader", "Leader", lambda leader: "*" if leader else ""), Column("status", "Status"),
    Column("logic_range", "Logic Range"),
]


def logic_range_text(first: int | None, last: int | None) -> str:
    """The seed's notation: ``0-100`` closed, ``101-`` open, ``-`` expired."""
    return f"{'' if first is None else first}-{'' if last is None else last}"


def static_status_document(status: StaticTopicStatus) -> dict:
    return {
        "topic": status.topic, "static": True, "total_queues": status.total_queues, "epoch": status.epoch,
        "broker_epochs": dict(sorted(status.broker_epochs.items())), "unreachable": status.unreachable,
        "missing": status.missing,
        "logic_queues": [
            {"logic_id": q.logic_id, "leader_broker": q.leader_broker, "leader_queue_id": q.leader_queue_id,
             "min_offset": q.min_offset, "max_offset": q.max_offset,
             "items": [dataclasses.asdict(i) for i in q.items]}
            for q in status.queues],
    }


def emit_static_status(status: StaticTopicStatus) -> None:
    if as_json():
        click.echo(to_json(static_status_document(status)))
        return
    rows = [{"logic_id": q.logic_id, **dataclasses.asdict(i),
             "logic_range": logic_range_text(i.logic_first, i.logic_last)} for q in status.queues for i in q.items]
    epochs = sorted(set(status.broker_epochs.values()))
    footer = ["", f"Static topic {status.topic}: {status.total_queues} logic queues, epoch {status.epoch}"]
    if len(epochs) > 1:
        footer.append("brokers disagree on the epoch (an interrupted change? run it again): " + ", ".join(
            f"{b}={e}" for b, e in sorted(status.broker_epochs.items())))
    footer += [f"broker {b} unreachable: {why}" for b, why in sorted(status.unreachable.items())]
    if status.missing:
        footer.append(f"logic queues without a chain on any answering broker: {status.missing}")
    click.echo(render_table(Table(STATIC_STATUS_COLUMNS, rows, footer=footer)))


@command("topicStatus", "Show each queue of a topic: min and max offset, last update time. For a static topic: "
                        "each logic queue's chain of physical queues.")
@topic_option
def topic_status(topic: str) -> None:
    admin = open_admin()
    try:
        maybe_static = admin.is_static_topic(topic)
    except MQClientError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        maybe_static = True  # not routed (yet): the brokers may hold a mapping that is not registered
    static = admin.static_topic_status(topic) if maybe_static else None
    if static is not None:
        emit_static_status(static)
        return
    queues = admin.topic_status(topic)
    rows = [{"broker_name": q.broker_name, "queue_id": q.queue_id, "min_offset": q.min_offset,
             "max_offset": q.max_offset, "last_update_timestamp": q.last_update_timestamp, **slave_mark(q.from_slave)}
            for q in queues]
    from_slaves = {q.broker_name: q.broker_id for q in queues if q.from_slave}
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("min_offset", "Min Offset"), Column("max_offset", "Max Offset"),
                                  Column("last_update_timestamp", "Last Updated", format_timestamp)], rows,
                                 footer=slave_note(from_slaves)))


COMMANDS = [update_topic, delete_topic, topic_list, topic_route, topic_status]
