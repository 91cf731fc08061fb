"""Static topic commands: updateStaticTopic, remappingStaticTopic (rules: ../shared/STATIC_TOPIC.md).

topicStatus shows a static topic's chains (topic_commands.py) and topicRoute its registered mapping."""

import click

from admin_cli.context import as_json, command, open_admin, resolve_targets, target_options
from admin_cli.output import Column, Table, emit_tables, render_table, to_json
from admin_cli.topic_commands import topic_option
from client.static_topic_admin import LogicQueueLeader, StaticTopicUpdate
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail


def check_queue_num(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    if value <= 0:
        raise click.BadParameter(f"the number of logic queues must be positive, got {value}")
    return value


def leader_rows(topic: str, epoch: int, leaders: list[LogicQueueLeader]) -> list[dict]:
    return [{"topic": topic, "logic_id": q.logic_id, "broker_name": q.broker_name, "queue_id": q.queue_id,
             "gen": q.gen, "logic_offset": q.logic_offset, "epoch": epoch} for q in leaders]


def broker_rows(details: dict[str, TopicQueueMappingDetail]) -> list[dict]:
    return [{"broker_name": b, "epoch": d.epoch, "total_queues": d.total_queues,
             "led_queues": sorted(d.led_queues())} for b, d in sorted(details.items())]


LEADER_COLUMNS = [Column("logic_id", "Logic QID"), Column("broker_name", "Leader Broker"),
                  Column("queue_id", "Physical QID"), Column("gen", "Gen"), Column("epoch", "Epoch")]
BROKER_COLUMNS = [Column("broker_name", "Broker"), Column("epoch", "Epoch"), Column("total_queues", "Total Queues"),
                  Column("led_queues", "Leads Logic QIDs", lambda ids: ",".join(map(str, ids)) or "-")]


# -- updateStaticTopic --------------------------------------------------------------------------------------
@command("updateStaticTopic", "Create a static topic with N logic queues, or extend it to N, on every master of a "
                              "cluster or on the named brokers (brokers already holding it join them).")
@topic_option
@target_options
@click.option("-qn", "--totalQueueNum", "queue_num", type=int, required=True, callback=check_queue_num,
              metavar="N", help="The total number of logic queues (greater than the current number).")
def update_static_topic(topic: str, cluster: str | None, brokers: str | None, queue_num: int) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    emit_static_update(topic, open_admin().update_static_topic(topic, queue_num, cluster=cluster_name,
                                                               brokers=broker_names))


def emit_static_update(topic: str, result: StaticTopicUpdate) -> None:
    emit_tables(as_json(),
                Table(LEADER_COLUMNS, leader_rows(topic, result.epoch, result.leaders()), name="logic_queues",
                      title=f"Static topic {topic}: {result.total_queues} logic queues, epoch {result.epoch}"),
                Table(BROKER_COLUMNS, broker_rows(result.details), name="brokers", title="Brokers"))


# -- remappingStaticTopic -----------------------------------------------------------------------------------
MOVED_COLUMNS = [Column("logic_id", "Logic QID"), Column("from_broker", "From"), Column("to_broker", "To"),
                 Column("queue_id", "New Physical QID"), Column("gen", "Gen"),
                 Column("logic_offset", "New Logic Offset")]


@command("remappingStaticTopic", "Move a static topic's logic queues onto every master of a cluster or onto the "
                                 "named brokers; run it again to complete a remap that failed part way.")
@topic_option
@target_options
def remapping_static_topic(topic: str, cluster: str | None, brokers: str | None) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    result = open_admin().remap_static_topic(topic, cluster=cluster_name, brokers=broker_names)
    moved = [{"logic_id": m.logic_id, "from_broker": m.from_broker, "to_broker": m.to_broker,
              "queue_id": m.queue_id, "gen": m.gen, "logic_offset": m.logic_offset,
              "old_end_offset": m.old_end_offset} for m in result.moved]
    if as_json():
        click.echo(to_json({"topic": topic, "epoch": result.epoch, "total_queues": result.total_queues,
                            "moved": moved, "logic_queues": leader_rows(topic, result.epoch, result.leaders()),
                            "brokers": broker_rows(result.details)}))
        return
    summary = f"{len(moved)} of {result.total_queues} logic queues moved" if moved else "no logic queue moved"
    click.echo(render_table(Table(MOVED_COLUMNS, moved, footer=["", f"Static topic {topic}: {summary}, "
                                                                     f"new epoch {result.epoch}"])))


COMMANDS = [update_static_topic, remapping_static_topic]
