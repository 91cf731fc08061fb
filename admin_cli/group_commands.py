"""Consumer group commands: updateSubGroup, consumerProgress."""

import click

from admin_cli.context import as_json, command, open_admin, resolve_targets, target_options
from admin_cli.output import Column, Table, emit_tables, format_timestamp

group_option = click.option("-g", "--groupName", "group", required=True, metavar="GROUP", help="Consumer group.")


@command("updateSubGroup", "Create or update a subscription group on every master of a cluster or on named brokers.")
@group_option
@target_options
@click.option("-s", "--consumeEnable", "consume_enable", type=bool, default=True, show_default=True,
              help="Whether the group may consume.")
@click.option("-r", "--retryMaxTimes", "retry_max_times", type=click.IntRange(min=0), default=16,
              show_default=True, help="Redeliveries before a message goes to the dead-letter queue.")
def update_sub_group(group: str, cluster: str | None, brokers: str | None, consume_enable: bool,
                     retry_max_times: int) -> None:
    cluster_name, broker_names = resolve_targets(cluster, brokers)
    done = open_admin().update_subscription_group(group, cluster=cluster_name, brokers=broker_names,
                                                  consume_enable=consume_enable, retry_max_times=retry_max_times)
    rows = [{"group": group, "broker_name": b, "consume_enable": consume_enable, "retry_max_times": retry_max_times}
            for b in done]
    emit_tables(as_json(), Table([Column("group", "Group"), Column("broker_name", "Broker"),
                                  Column("consume_enable", "Consume Enable"),
                                  Column("retry_max_times", "Retry Max Times")], rows))


@command("consumerProgress", "Show a group's offsets per queue against the brokers' max offsets, and the total lag.")
@group_option
@click.option("-t", "--topic", metavar="TOPIC", help="Only this topic.")
def consumer_progress(group: str, topic: str | None) -> None:
    progress = open_admin().consumer_progress(group, topic)
    rows = [{"topic": p.topic, "broker_name": p.broker_name, "queue_id": p.queue_id,
             "broker_offset": p.broker_offset, "consumer_offset": p.consumer_offset, "diff": p.diff,
             "last_timestamp": p.last_timestamp} for p in progress]
    total = sum(p.diff for p in progress)
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("broker_offset", "Broker Offset"),
                                  Column("consumer_offset", "Consumer Offset"), Column("diff", "Diff"),
                                  Column("last_timestamp", "Last Time", format_timestamp)],
                                 rows, footer=["", f"Diff Total: {total}"]))


COMMANDS = [update_sub_group, consumer_progress]
