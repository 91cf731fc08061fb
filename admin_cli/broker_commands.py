"""Broker commands for operators: brokerStatus, getBrokerConfig, updateBrokerConfig, wipeWritePerm, addWritePerm,
producerConnection, statsAll."""

import click

from admin_cli.context import CommandFailed, as_json, command, open_admin, open_broker_admin
from admin_cli.output import Column, Row, Table, emit_tables


def _key_value_rows(table: dict[str, str]) -> list[Row]:
    return [{"key": key, "value": value} for key, value in sorted(table.items())]


KEY_VALUE = [Column("key", "Key"), Column("value", "Value")]


@command("brokerStatus", "Show a broker's runtime info (versions, offsets, TPS, role, disk usage) by address.")
@click.option("-b", "--brokerAddr", "broker_addr", required=True, metavar="HOST:PORT", help="Broker address.")
def broker_status(broker_addr: str) -> None:
    table = open_broker_admin(broker_addr).broker_runtime_info(broker_addr.strip())
    emit_tables(as_json(), Table(KEY_VALUE, _key_value_rows(table)))


@command("getBrokerConfig", "Show a broker's configuration (every broker.conf key and its current value).")
@click.option("-b", "--brokerAddr", "broker_addr", required=True, metavar="HOST:PORT", help="Broker address.")
def get_broker_config(broker_addr: str) -> None:
    table, live = open_broker_admin(broker_addr).broker_config(broker_addr.strip())
    rows = [{**row, "live": row["key"] in live} for row in _key_value_rows(table)]
    emit_tables(as_json(), Table([*KEY_VALUE, Column("live", "Live")], rows,
                                 footer=["", "Live keys change at once with updateBrokerConfig (until the broker "
                                             "restarts); the others need broker.conf and a restart."]))


@command("updateBrokerConfig", "Change a broker configuration key while it runs (live keys only; until restart).")
@click.option("-b", "--brokerAddr", "broker_addr", required=True, metavar="HOST:PORT", help="Broker address.")
@click.option("-k", "--key", "key", required=True, metavar="KEY", help="broker.conf key.")
@click.option("-v", "--value", "value", required=True, metavar="VALUE", help="New value.")
def update_broker_config(broker_addr: str, key: str, value: str) -> None:
    admin = open_broker_admin(broker_addr)
    admin.update_broker_config(broker_addr.strip(), key.strip(), value)
    table, _live = admin.broker_config(broker_addr.strip())
    row = {"broker_addr": broker_addr.strip(), "key": key.strip(), "value": table.get(key.strip(), value),
           "lasts": "until restart (set it in broker.conf to keep it)"}
    emit_tables(as_json(), Table([Column("broker_addr", "Broker"), Column("key", "Key"), Column("value", "Value"),
                                  Column("lasts", "Lasts")], [row]))


def _write_perm(broker_name: str, writeable: bool) -> None:
    name = broker_name.strip()
    if not name:
        raise click.UsageError("-b needs a broker name")
    counts = open_admin().set_write_perm(name, writeable)
    rows = [{"namesrv_addr": addr, "broker_name": name, "writeable": writeable, "topic_count": n}
            for addr, n in counts.items()]
    emit_tables(as_json(), Table([Column("namesrv_addr", "Name Server"), Column("broker_name", "Broker"),
                                  Column("writeable", "Writeable"), Column("topic_count", "Topics")], rows))


@command("wipeWritePerm", "Stop producers sending to a broker (before maintenance): every name server routes its "
         "queues read-only until addWritePerm.")
@click.option("-b", "--brokerName", "broker_name", required=True, metavar="BROKER", help="Broker name.")
def wipe_write_perm(broker_name: str) -> None:
    _write_perm(broker_name, False)


@command("addWritePerm", "Let producers send to a broker again (undoes wipeWritePerm on every name server).")
@click.option("-b", "--brokerName", "broker_name", required=True, metavar="BROKER", help="Broker name.")
def add_write_perm(broker_name: str) -> None:
    _write_perm(broker_name, True)


@command("producerConnection", "List a producer group's connections as the brokers see them (producers with a "
         "transaction checker keep sessions; plain producers are not tracked).")
@click.option("-g", "--producerGroup", "group", required=True, metavar="GROUP", help="Producer group.")
@click.option("-t", "--topic", "topic", default=None, metavar="TOPIC",
              help="Accepted as upstream's; sessions are per group, not per topic.")
def producer_connection(group: str, topic: str | None) -> None:
    connections = open_admin().producer_connections(group.strip())
    rows = [{"broker_name": broker, "client_id": c.client_id, "addr": c.addr,
             "last_heartbeat_age_ms": c.last_heartbeat_age_ms} for broker, c in connections]
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("client_id", "Client ID"),
                                  Column("addr", "Client Addr"), Column("last_heartbeat_age_ms", "Heartbeat Age ms")],
                                 rows))


@command("statsAll", "Per topic (messages in) and per consumer group of a topic (messages out): totals, lag and "
         "TPS over the last 10 s, from every master.")
@click.option("-t", "--topic", "topic", default=None, metavar="TOPIC", help="Only this topic.")
def stats_all(topic: str | None) -> None:
    rows = [{"broker_name": broker, "topic": r.topic, "group": r.group, "total": r.total,
             "lag": r.lag if r.group else None, "tps": round(r.tps, 1), "count_since_boot": r.count_since_boot}
            for broker, r in open_admin().stats_all() if topic is None or r.topic == topic]
    if topic is not None and not rows:
        raise CommandFailed(f"topic {topic} is on no master")
    rows.sort(key=lambda r: (r["topic"], r["group"], r["broker_name"]))
    emit_tables(as_json(), Table([Column("topic", "Topic"), Column("group", "Consumer Group",
                                                                   lambda g: g or "-"),
                                  Column("broker_name", "Broker"), Column("total", "Total"), Column("lag", "Lag"),
                                  Column("tps", "TPS"), Column("count_since_boot", "Since Boot")], rows,
                                 footer=["", "Topic rows: Total = messages stored, TPS = sends; group rows: Total = "
                                             "committed, TPS = messages pulled or popped."]))


COMMANDS = [broker_status, get_broker_config, update_broker_config, wipe_write_perm, add_write_perm,
            producer_connection, stats_all]
