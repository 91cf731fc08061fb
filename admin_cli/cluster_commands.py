"""Cluster commands: clusterList."""

from concurrent.futures import ThreadPoolExecutor

from admin_cli.context import CommandFailed, as_json, command, open_admin
from admin_cli.output import Column, Row, Table, emit_tables, format_duration
from client.admin import Admin, BrokerInfo
from client.errors import MQClientError

STATUS_OK = "OK"
STATUS_NO_ANSWER = "NO ANSWER"
STATUS_DENIED = "DENIED"  # it answered: the credentials (or their rights) were refused
DENIALS = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


def _number(table: dict[str, str], key: str, kind: type[int] | type[float]) -> int | float | None:
    try:
        return kind(table[key])
    except (KeyError, ValueError):
        return None


def broker_row(admin: Admin, broker: BrokerInfo) -> Row:
    """One broker with a few runtime figures; a broker that does not answer gets empty figures, not a failure."""
    row: Row = {"cluster": broker.cluster, "broker_name": broker.broker_name, "broker_id": broker.broker_id,
                "addr": broker.addr}
    status = STATUS_OK
    try:
        runtime = admin.broker_runtime_info(broker.addr)
        error = None
    except MQClientError as exc:
        runtime, error = {}, str(exc)
        status = STATUS_DENIED if exc.status in DENIALS else STATUS_NO_ANSWER
    row.update(role=runtime.get("brokerRole") or ("MASTER" if broker.broker_id == 0 else "SLAVE"),
               put_tps=_number(runtime, "putTps", float), get_tps=_number(runtime, "getTps", float),
               topic_count=_number(runtime, "topicCount", int), uptime_ms=_number(runtime, "uptimeMs", int),
               store_type=runtime.get("storeType"), status=status, error=error)
    return row


@command("clusterList", "List the brokers of every cluster with a few runtime figures.")
def cluster_list() -> None:
    admin = open_admin()
    brokers = admin.all_brokers()
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(brokers)))) as pool:  # a silent broker costs one timeout
        rows = list(pool.map(lambda b: broker_row(admin, b), brokers))
    if rows and all(r["status"] == STATUS_DENIED for r in rows):  # the caller's credentials, not the brokers
        raise CommandFailed(f"every broker refused these credentials: {rows[0]['error']}")
    emit_tables(as_json(), Table([Column("cluster", "Cluster"), Column("broker_name", "Broker"),
                                  Column("broker_id", "BID"), Column("addr", "Address"), Column("role", "Role"),
                                  Column("put_tps", "Put TPS"), Column("get_tps", "Get TPS"),
                                  Column("topic_count", "Topics"), Column("uptime_ms", "Uptime", format_duration),
                                  Column("store_type", "Store"), Column("status", "Status")], rows))


COMMANDS = [cluster_list]
