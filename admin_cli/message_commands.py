"""Message commands: queryMsgByKey, queryMsgById, queryMsgByOffset, sendMessage, consumeMessage."""

import click

from admin_cli.context import (
    INT32_MAX,
    INT64_MAX,
    NO_NAMESRV,
    CommandFailed,
    as_json,
    command,
    open_admin,
    settings,
    timeout_ms,
)
from admin_cli.output import (
    Column,
    Row,
    Table,
    body_preview,
    emit_record,
    emit_tables,
    format_timestamp,
    slave_mark,
    slave_note,
)
from client import Message, Producer, PullConsumer
from client.admin import TOOLS_CONSUMER_GROUP
from common.message import MessageExt

TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"


def message_row(msg: MessageExt) -> Row:
    return {"msg_id": msg.msg_id, "offset_msg_id": msg.offset_msg_id, "topic": msg.topic, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "commit_log_offset": msg.physical_offset, "tags": msg.tags, "keys": msg.keys,
            "store_timestamp": msg.store_timestamp, "born_timestamp": msg.born_timestamp,
            "store_host": msg.store_host, "born_host": msg.born_host, "reconsume_times": msg.reconsume_times,
            "properties": dict(msg.properties), "body_size": len(msg.body), "body_preview": body_preview(msg.body)}


@command("queryMsgByKey", "Find a topic's messages by key (through the brokers' index).")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-k", "--msgKey", "key", required=True, metavar="KEY", help="Message key.")
def query_msg_by_key(topic: str, key: str) -> None:
    found = open_admin().query_msg_by_key(topic, key)
    if not found:
        raise CommandFailed(f"no message with key {key!r} in topic {topic}")
    emit_tables(as_json(), Table([Column("msg_id", "Message ID"), Column("queue_id", "QID"),
                                  Column("queue_offset", "Offset"), Column("tags", "Tags"), Column("keys", "Keys"),
                                  Column("store_timestamp", "Store Time", format_timestamp),
                                  Column("body_preview", "Body")], [message_row(m) for m in found]))


RECORD = [Column("msg_id", "Message ID"), Column("offset_msg_id", "Offset Message ID"), Column("topic", "Topic"),
          Column("queue_id", "Queue ID"),
          Column("queue_offset", "Queue Offset"), Column("commit_log_offset", "CommitLog Offset"),
          Column("tags", "Tags"), Column("keys", "Keys"),
          Column("store_timestamp", "Store Time", format_timestamp),
          Column("born_timestamp", "Born Time", format_timestamp), Column("store_host", "Store Host"),
          Column("born_host", "Born Host"), Column("reconsume_times", "Reconsume Times"),
          Column("properties", "Properties", lambda p: ", ".join(f"{k}={v}" for k, v in sorted(p.items())) or "-"),
          Column("body_size", "Body Size"), Column("body_preview", "Body")]


@command("queryMsgById", "Show one message by its id: the msgId a send returned (its unique key) or its "
         "offsetMsgId (store host and commitlog offset).")
@click.option("-i", "--msgId", "msg_id", required=True, metavar="ID", help="Message id or offset message id.")
@click.option("-t", "--topic", default=None, metavar="TOPIC", help="Topic of a unique-key id (default: search all).")
def query_msg_by_id(msg_id: str, topic: str | None) -> None:
    emit_record(as_json(), RECORD, message_row(open_admin().query_msg_by_id(msg_id.strip(), topic)))


@command("queryMsgByOffset", "Show the message at an offset of one queue of a topic on a broker.")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-b", "--brokerName", "broker_name", required=True, metavar="BROKER", help="Broker name.")
@click.option("-i", "--queueId", "queue_id", required=True, type=click.IntRange(0, INT32_MAX), metavar="QUEUE",
              help="Queue id.")
@click.option("-o", "--offset", "offset", required=True, type=click.IntRange(0, INT64_MAX), metavar="OFFSET",
              help="Queue offset.")
def query_msg_by_offset(topic: str, broker_name: str, queue_id: int, offset: int) -> None:
    found = open_admin().query_msg_by_offset(topic.strip(), broker_name.strip(), queue_id, offset)
    emit_record(as_json(), RECORD, {**message_row(found.message), **slave_mark(found.from_slave)})
    if found.from_slave and not as_json():
        click.echo("\n".join(slave_note({broker_name.strip(): found.broker_id})))


SEND_COLUMNS = [Column("topic", "Topic"), Column("broker_name", "Broker"), Column("queue_id", "QID"),
                Column("queue_offset", "Offset"), Column("msg_id", "Message ID"),
                Column("offset_msg_id", "Offset Message ID")]


@command("sendMessage", "Send one message (a quick check that a topic takes writes).")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-p", "--body", "body", required=True, metavar="BODY", help="Message body (UTF-8 text).")
@click.option("-k", "--keys", "keys", default=None, metavar="KEYS", help="Keys, comma-separated.")
@click.option("-c", "--tags", "tags", default=None, metavar="TAGS", help="Tags.")
def send_message(topic: str, body: str, keys: str | None, tags: str | None) -> None:
    ctx = click.get_current_context()
    addr = (settings(ctx).namesrv_addr or "").strip()
    if not addr:
        raise CommandFailed(NO_NAMESRV, ctx)
    key_list = [k.strip() for k in keys.split(",") if k.strip()] if keys else None
    producer = ctx.with_resource(Producer(addr, group=TOOLS_PRODUCER_GROUP, send_timeout_ms=timeout_ms(),
                                          retry_times=0, tls_ca=settings(ctx).tls_ca,
                                          credentials=settings(ctx).credentials))
    result = producer.send(Message(topic.strip(), body.encode(), tags=tags or None, keys=key_list))
    emit_tables(as_json(), Table(SEND_COLUMNS, [{
        "topic": result.queue.topic, "broker_name": result.queue.broker_name, "queue_id": result.queue.queue_id,
        "queue_offset": result.queue_offset, "msg_id": result.msg_id, "offset_msg_id": result.offset_msg_id}]))


@command("consumeMessage", "Read a topic's messages (a quick check): from the oldest kept, or with -g from the "
         "group's committed offsets, committing what was read.")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-g", "--consumerGroup", "group", default=None, metavar="GROUP",
              help="Read from this group's committed offsets and commit after reading.")
@click.option("-c", "--count", "count", default=128, show_default=True, type=click.IntRange(1, 100_000),
              metavar="COUNT", help="At most this many messages.")
def consume_message(topic: str, group: str | None, count: int) -> None:
    ctx = click.get_current_context()
    addr = (settings(ctx).namesrv_addr or "").strip()
    if not addr:
        raise CommandFailed(NO_NAMESRV, ctx)
    consumer = ctx.with_resource(PullConsumer(addr, group=group or TOOLS_CONSUMER_GROUP, rpc_timeout_ms=timeout_ms(),
                                              tls_ca=settings(ctx).tls_ca, credentials=settings(ctx).credentials))
    found: list[tuple[str, MessageExt]] = []
    for mq in consumer.queues(topic.strip()):
        offset = max(consumer.committed(mq), consumer.min_offset(mq)) if group else consumer.min_offset(mq)
        while len(found) < count:
            result = consumer.pull(mq, offset=offset, max_nums=min(32, count - len(found)))
            if not result.messages:
                break
            found += [(mq.broker_name, m) for m in result.messages]
            offset = result.next_begin_offset
        if group and offset > max(consumer.committed(mq), 0):
            consumer.commit(mq, offset)
        if len(found) >= count:
            break
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("queue_id", "QID"),
                                  Column("queue_offset", "Offset"), Column("msg_id", "Message ID"),
                                  Column("tags", "Tags"), Column("keys", "Keys"),
                                  Column("store_timestamp", "Store Time", format_timestamp),
                                  Column("body_preview", "Body")],
                                 [{**message_row(m), "broker_name": broker} for broker, m in found],
                                 footer=[f"{len(found)} message(s)"]))


COMMANDS = [query_msg_by_key, query_msg_by_id, query_msg_by_offset, send_message, consume_message]
