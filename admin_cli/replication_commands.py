"""Replication controller commands: getSyncStateSet, electMaster (RocketMQ's mqadmin names).

The controller runs inside a name server started with ``--enable-controller``. ``-n`` may name several name
servers: each is asked in turn; one without the controller answers UNIMPLEMENTED (its service is not there)
and the next is tried, as is one that cannot be reached.
"""

from collections.abc import Callable
from typing import Any, TypeVar

import click
import grpc

from admin_cli.context import INT64_MAX, NO_NAMESRV, CommandFailed, as_json, command, settings, timeout_ms
from admin_cli.output import Column, Row, Table, emit_record, render_record, render_table, to_json
from client.client_instance import namesrv_addrs
from client.grpc_errors import rpc_error
from common import tls
from common.acl import signed_channel, signer_of
from proto import controller_pb2, controller_pb2_grpc

T = TypeVar("T")
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

ASSIGNMENT_COLUMNS = [
    Column("broker_name", "Broker Name"), Column("master_id", "Master ID"), Column("master_addr", "Master Address"),
    Column("master_ha_addr", "Master HA Address"), Column("master_epoch", "Master Epoch"),
    Column("sync_state_set", "Sync State Set"), Column("sync_state_set_epoch", "Set Epoch"),
]
REPLICA_COLUMNS = [
    Column("broker_id", "BID"), Column("broker_addr", "Address"),
    Column("alive", "Alive", lambda v: "yes" if v else "no"), Column("master_epoch", "Epoch"),
    Column("max_offset", "Max Offset"), Column("confirm_offset", "Confirm Offset"),
    Column("last_heartbeat_age_ms", "Heartbeat Age ms", lambda v: "-" if v is None else str(v)),
    Column("in_sync_state_set", "In Set", lambda v: "yes" if v else "no"),
]

broker_name_option = click.option("-b", "--brokerName", "broker_name", required=True, metavar="BROKER_NAME",
                                  help="The broker group (brokerName).")


def call_controller(what: str, call: Callable[[controller_pb2_grpc.ControllerServiceStub], T]) -> T:
    """``call`` on the first name server of ``-n`` that runs the controller; one-line failures otherwise."""
    ctx = click.get_current_context()
    raw = (settings(ctx).namesrv_addr or "").strip()
    if not raw:
        raise CommandFailed(NO_NAMESRV, ctx)
    try:
        ca = tls.read_ca(path) if (path := settings(ctx).tls_ca) else None
    except tls.TlsError as exc:
        raise CommandFailed(str(exc), ctx) from None
    unreachable: list[str] = []
    for addr in namesrv_addrs(raw):
        channel = signed_channel(ctx.with_resource(tls.channel(addr, ca=ca)), signer_of(settings(ctx).credentials))
        try:
            return call(controller_pb2_grpc.ControllerServiceStub(channel))
        except grpc.RpcError as exc:
            status = exc.code() if hasattr(exc, "code") else None
            if status is grpc.StatusCode.UNIMPLEMENTED:  # a name server without --enable-controller
                continue
            if status in UNREACHABLE:
                unreachable.append(str(rpc_error(what, addr, exc)))
                continue
            raise CommandFailed(str(rpc_error(what, addr, exc)), ctx) from None
    if unreachable:
        raise CommandFailed(f"no reachable name server in {raw} runs the controller; {unreachable[-1]}", ctx)
    raise CommandFailed(f"no name server in {raw} runs the controller (start one with --enable-controller)", ctx)


def assignment_row(a: controller_pb2.ReplicaAssignment) -> Row:
    return {"broker_name": a.broker_name, "master_id": a.master_id, "master_addr": a.master_addr or None,
            "master_ha_addr": a.master_ha_addr or None, "master_epoch": a.master_epoch,
            "sync_state_set": sorted(a.sync_state_set), "sync_state_set_epoch": a.sync_state_set_epoch}


def replica_rows(data: controller_pb2.SyncStateData) -> list[Row]:
    members = set(data.assignment.sync_state_set)
    return [{"broker_id": r.broker_id, "broker_addr": r.broker_addr, "alive": r.alive, "master_epoch": r.master_epoch,
             "max_offset": r.max_offset, "confirm_offset": r.confirm_offset,
             "last_heartbeat_age_ms": r.last_heartbeat_age_ms if r.last_heartbeat_age_ms >= 0 else None,
             "in_sync_state_set": r.broker_id in members} for r in sorted(data.replicas, key=lambda r: r.broker_id)]


@command("getSyncStateSet", "Show a broker group's master, master epoch and in-sync replica set as the "
                            "controller decided them, and what each replica last reported.")
@broker_name_option
def get_sync_state_set(broker_name: str) -> None:
    data = call_controller(f"sync state set of {broker_name}", lambda stub: stub.GetSyncStateData(
        controller_pb2.GetSyncStateDataRequest(broker_name=broker_name), timeout=timeout_ms() / 1000))
    record: dict[str, Any] = {"cluster_name": data.cluster_name, **assignment_row(data.assignment)}
    rows = replica_rows(data)
    if as_json():
        click.echo(to_json({**record, "replicas": rows}))
        return
    columns = [ASSIGNMENT_COLUMNS[0], Column("cluster_name", "Cluster"), *ASSIGNMENT_COLUMNS[1:]]
    click.echo(render_record(columns, record) + "\n\n" + render_table(Table(REPLICA_COLUMNS, rows)))


@command("electMaster", "Make a replica the master of its broker group (it must be alive, and in the sync state "
                        "set unless the controller allows unclean elections); -i 0 lets the controller choose.")
@broker_name_option
@click.option("-i", "--brokerId", "broker_id", required=True, type=click.IntRange(min=0, max=INT64_MAX), metavar="ID",
              help="The replica's brokerId; 0: the controller chooses.")
def elect_master(broker_name: str, broker_id: int) -> None:
    assignment = call_controller(f"election of {broker_name}/{broker_id}", lambda stub: stub.ElectMaster(
        controller_pb2.ElectMasterRequest(broker_name=broker_name, broker_id=broker_id), timeout=timeout_ms() / 1000))
    emit_record(as_json(), ASSIGNMENT_COLUMNS, assignment_row(assignment))


COMMANDS = [get_sync_state_set, elect_master]
