"""Logic queue commands (seed 004's operator side): migrateLogicalQueue, drainBroker, drainStatus,
rebalanceLogicalQueues. The seed's command names map onto ours in the README."""

import click

from admin_cli.context import as_json, command, open_admin
from admin_cli.output import Column, Table, format_timestamp, render_table, to_json
from admin_cli.static_topic_commands import MOVED_COLUMNS
from admin_cli.topic_commands import topic_option
from client.logical_queue_admin import DrainStatus, LogicQueueMoves, TopicMove

broker_option = click.option("-b", "--brokerName", "broker", required=True, metavar="BROKER", help="Broker name.")
TOPIC_MOVED_COLUMNS = [Column("topic", "Topic"), *MOVED_COLUMNS,
                       Column("reused", "Reused", lambda r: "yes" if r else "")]


def moved_rows(result: LogicQueueMoves) -> list[dict]:
    return [{"topic": t.topic, "logic_id": t.move.logic_id, "from_broker": t.move.from_broker,
             "to_broker": t.move.to_broker, "queue_id": t.move.queue_id, "gen": t.move.gen,
             "logic_offset": t.move.logic_offset, "reused": t.move.reused} for t in result.moves]


def emit_moves(result: LogicQueueMoves, summary: str) -> None:
    rows = moved_rows(result)
    if as_json():
        click.echo(to_json({"topics": result.topics, "moved": rows}))
        return
    click.echo(render_table(Table(TOPIC_MOVED_COLUMNS, rows, footer=["", summary])))


# -- migrateLogicalQueue ------------------------------------------------------------------------------------
@command("migrateLogicalQueue", "Move one logic queue of a static topic onto a broker (an expired physical queue of "
                                "its chain there is reused); run it again to finish a move that failed part way.")
@topic_option
@click.option("-q", "--queueId", "logic_id", type=click.IntRange(min=0), required=True, metavar="ID",
              help="The logic queue id.")
@broker_option
def migrate_logical_queue(topic: str, logic_id: int, broker: str) -> None:
    remap = open_admin().migrate_logical_queue(topic, logic_id, broker)
    result = LogicQueueMoves([TopicMove(topic, m) for m in remap.moved], topics=1)
    leader = next((q.broker_name for q in remap.leaders() if q.logic_id == logic_id), "nobody")
    emit_moves(result, f"Static topic {topic}: logic queue {logic_id} now led by {leader}, epoch {remap.epoch}")


# -- drainBroker --------------------------------------------------------------------------------------------
@command("drainBroker", "Move every logic queue a broker leads, over all static topics (the KV store's shards too), "
                        "onto the other masters of its cluster. Then watch drainStatus until it can be removed.")
@broker_option
def drain_broker(broker: str) -> None:
    result = open_admin().drain_broker(broker)
    emit_moves(result, f"broker {broker}: {len(result.moves)} logic queues moved away over {result.topics} static "
                       f"topics; see drainStatus -b {broker}")


# -- rebalanceLogicalQueues ---------------------------------------------------------------------------------
@command("rebalanceLogicalQueues", "Spread every static topic's logic queue leaders over the masters of a cluster "
                                   "(a new broker takes its share) with the fewest moves.")
@click.option("-c", "--clusterName", "cluster", required=True, metavar="CLUSTER", help="Cluster name.")
@click.option("-x", "--exclude", metavar="BROKER[,BROKER]", default="",
              help="Brokers that take no logic queue (e.g. one being drained); they give up what they lead.")
def rebalance_logical_queues(cluster: str, exclude: str) -> None:
    excluded = [b.strip() for b in exclude.split(",") if b.strip()]
    result = open_admin().rebalance_logical_queues(cluster, excluded)
    emit_moves(result, f"cluster {cluster}: {len(result.moves)} logic queues moved over {result.topics} static topics")


# -- drainStatus --------------------------------------------------------------------------------------------
HELD_COLUMNS = [Column("topic", "Topic"), Column("logic_id", "Logic QID"), Column("queue_id", "Physical QID"),
                Column("status", "Status"), Column("min_offset", "Min Offset"), Column("max_offset", "Max Offset"),
                Column("expires_after_ms", "Expires After", format_timestamp)]


def drain_verdict(status: DrainStatus) -> str:
    if status.removable:
        return f"broker {status.broker} can be removed: it leads no logic queue and no chain names it"
    reasons = []
    if status.leads:
        reasons.append(f"it still leads {sum(map(len, status.leads.values()))} logic queues (run drainBroker)")
    readable = [h for h in status.held if h.status != "Expired"]
    if readable:
        reasons.append(f"{len(readable)} physical queues there still hold readable data")
    if len(status.held) > len(readable):
        reasons.append(f"{len(status.held) - len(readable)} expired ones are still named by their chains (the "
                       "leaders' static-topic clean service forgets them)")
    if status.timer_pending:
        reasons.append(f"its timer still holds {status.timer_pending} delayed messages (delivered when due, then 0)")
    return f"broker {status.broker} cannot be removed yet: " + "; ".join(reasons)


@command("drainStatus", "Say what still holds readable data on a drained broker and when it expires, and whether "
                        "the broker can be removed.")
@broker_option
def drain_status(broker: str) -> None:
    status = open_admin().drain_status(broker)
    rows = [{"topic": h.topic, "logic_id": h.logic_id, "queue_id": h.queue_id, "status": h.status,
             "min_offset": h.min_offset, "max_offset": h.max_offset, "expires_after_ms": h.expires_after_ms}
            for h in status.held]
    if as_json():
        click.echo(to_json({"broker": broker, "removable": status.removable, "leads": status.leads,
                            "held": rows, "file_reserved_hours": status.file_reserved_hours,
                            "timer_pending": status.timer_pending,
                            "verdict": drain_verdict(status)}))
        return
    click.echo(render_table(Table(HELD_COLUMNS, rows, footer=["", drain_verdict(status)])))


COMMANDS = [migrate_logical_queue, drain_broker, drain_status, rebalance_logical_queues]
