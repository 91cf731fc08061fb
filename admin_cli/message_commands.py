"""Message commands: queryMsgByKey, queryMsgById."""

import click

from admin_cli.context import CommandFailed, as_json, command, open_admin
from admin_cli.output import Column, Row, Table, body_preview, emit_record, emit_tables, format_timestamp
from common.message import MessageExt


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


COMMANDS = [query_msg_by_key, query_msg_by_id]
