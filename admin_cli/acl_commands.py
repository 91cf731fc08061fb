"""ACL commands (RocketMQ 5's ACL 2.0): createUser, updateUser, deleteUser, listUser, createAcl, deleteAcl,
listAcl. Each applies to every master of a cluster (-c, default DefaultCluster) or to named brokers (-b), and
needs an admin's credentials (--access-key/--secret-key or ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY)."""

from collections.abc import Callable
from typing import Any, TypeVar

import click

from admin_cli.context import as_json, command, open_admin, parse_broker_list
from admin_cli.output import Column, Table, emit_tables
from client.acl_admin import AclAdmin
from common.acl import key_pair

DEFAULT_CLUSTER = "DefaultCluster"
F = TypeVar("F", bound=Callable[..., Any])


def credentials(access_key: str | None, secret_key: str | None) -> tuple[str, str] | None:
    """The (access key, secret key) pair of the global flags; both or neither."""
    try:
        return key_pair(access_key, secret_key)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _targets(cluster: str | None, brokers: str | None) -> tuple[str | None, list[str] | None]:
    if cluster is not None and brokers is not None:
        raise click.UsageError("give at most one of -c CLUSTER or -b BROKER[,BROKER]")
    if brokers is not None:
        return None, parse_broker_list(brokers)
    return (cluster or DEFAULT_CLUSTER).strip(), None


def _targets_options(func: F) -> F:
    func = click.option("-b", "--brokerName", "brokers", metavar="BROKER[,BROKER]",
                        help="Comma-separated broker names (exclusive with -c).")(func)
    return click.option("-c", "--clusterName", "cluster", metavar="CLUSTER",
                        help=f"Every master of this cluster (default {DEFAULT_CLUSTER}).")(func)


def _done(what: str, names: list[str]) -> None:
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("result", "Result")],
                                 [{"broker_name": n, "result": what} for n in names]))


@command("createUser", "Create an ACL user (username = access key, password = secret key).")
@click.option("-u", "--username", required=True, metavar="USER")
@click.option("-p", "--password", required=True, metavar="PASSWORD")
@click.option("-t", "--userType", "user_type", default="Normal", show_default=True,
              type=click.Choice(["Normal", "Super"], case_sensitive=False), help="Super users are admins.")
@_targets_options
def create_user(username: str, password: str, user_type: str, cluster: str | None, brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    _done("created", AclAdmin(open_admin()).create_user(username, password, user_type, c, b))


@command("updateUser", "Change an ACL user's password or type.")
@click.option("-u", "--username", required=True, metavar="USER")
@click.option("-p", "--password", default="", metavar="PASSWORD")
@click.option("-t", "--userType", "user_type", default="", type=click.Choice(["", "Normal", "Super"],
                                                                              case_sensitive=False))
@_targets_options
def update_user(username: str, password: str, user_type: str, cluster: str | None, brokers: str | None) -> None:
    if not password and not user_type:
        raise click.UsageError("updateUser needs -p PASSWORD or -t USER_TYPE (or both)")
    c, b = _targets(cluster, brokers)
    _done("updated", AclAdmin(open_admin()).update_user(username, password, user_type, c, b))


@command("deleteUser", "Delete an ACL user (and its policy).")
@click.option("-u", "--username", required=True, metavar="USER")
@_targets_options
def delete_user(username: str, cluster: str | None, brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    _done("deleted", AclAdmin(open_admin()).delete_user(username, c, b))


@command("listUser", "List ACL users (never their passwords).")
@click.option("-u", "--username", default="", metavar="USER", help="Only this user.")
@_targets_options
def list_user(username: str, cluster: str | None, brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    users = AclAdmin(open_admin()).list_users(c, b, username)
    rows = [{"broker_name": n, "username": u, "user_type": t} for n, us in sorted(users.items()) for u, t in us]
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("username", "Username"),
                                  Column("user_type", "Type")], rows))


@command("createAcl", "Grant or deny a user actions on resources: -s User:U -r Topic:T -a Pub,Sub -d Allow.")
@click.option("-s", "--subject", required=True, metavar="User:NAME")
@click.option("-r", "--resources", required=True, metavar="RESOURCE[,RESOURCE]",
              help="Topic:NAME, Topic:PREFIX*, Group:NAME, Group:PREFIX* or *.")
@click.option("-a", "--actions", required=True, metavar="ACTION[,ACTION]", help="Pub, Sub, All.")
@click.option("-d", "--decision", default="Allow", show_default=True,
              type=click.Choice(["Allow", "Deny"], case_sensitive=False))
@_targets_options
def create_acl(subject: str, resources: str, actions: str, decision: str, cluster: str | None,
               brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    names = AclAdmin(open_admin()).create_acl(subject, [r for r in resources.split(",") if r.strip()],
                                              [a for a in actions.split(",") if a.strip()], decision, c, b)
    _done("created", names)


@command("deleteAcl", "Delete a subject's ACL entries (on one resource with -r, else all of them).")
@click.option("-s", "--subject", required=True, metavar="User:NAME")
@click.option("-r", "--resource", default="", metavar="RESOURCE")
@_targets_options
def delete_acl(subject: str, resource: str, cluster: str | None, brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    _done("deleted", AclAdmin(open_admin()).delete_acl(subject, resource, c, b))


@command("listAcl", "List ACL entries.")
@click.option("-s", "--subject", default="", metavar="User:NAME", help="Only this subject.")
@_targets_options
def list_acl(subject: str, cluster: str | None, brokers: str | None) -> None:
    c, b = _targets(cluster, brokers)
    acls = AclAdmin(open_admin()).list_acls(c, b, subject)
    rows = [{"broker_name": n, "subject": s, "resource": r, "actions": ",".join(a), "decision": d}
            for n, entries in sorted(acls.items()) for s, r, a, d in entries]
    emit_tables(as_json(), Table([Column("broker_name", "Broker"), Column("subject", "Subject"),
                                  Column("resource", "Resource"), Column("actions", "Actions"),
                                  Column("decision", "Decision")], rows))


COMMANDS = [create_user, update_user, delete_user, list_user, create_acl, delete_acl, list_acl]
