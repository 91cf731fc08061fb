"""ACL administration (users and policies) on every master of a cluster or on named brokers, as updateTopic does.

Every call needs an admin (a Super user's credentials on the Admin). A broker without ACL does not serve these
RPCs: that is said plainly."""

from collections.abc import Sequence
from typing import Any

import grpc

from client.admin import Admin
from client.errors import MQClientError, partly_applied
from client.grpc_errors import business_error, rpc_error
from common.response_code import ResponseCode
from proto import acl_pb2, acl_pb2_grpc


class AclAdmin:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin

    def _call(self, what: str, method: str, request: Any, cluster: str | None,
              brokers: list[str] | None) -> list[tuple[str, Any]]:
        if (cluster is None) == (brokers is None):
            raise MQClientError("give exactly one of a cluster or a broker list")
        out: list[tuple[str, Any]] = []
        targets = self.admin.brokers(cluster, brokers)
        for i, b in enumerate(targets):
            try:
                out.append((b.broker_name, self._call_one(what, method, request, b.broker_name, b.addr)))
            except MQClientError as exc:
                raise partly_applied(exc, [name for name, _ in out],
                                     [t.broker_name for t in targets[i + 1:]]) from None
        return out

    def _call_one(self, what: str, method: str, request: Any, broker_name: str, addr: str) -> Any:
        stub = self.admin.client.stub(acl_pb2_grpc.AclServiceStub, addr)
        try:
            response = getattr(stub, method)(request, timeout=self.admin.client.rpc_timeout_s)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                raise MQClientError(f"{what} failed at {addr}: broker {broker_name} does not serve ACL "
                                    "(authenticationEnabled/authorizationEnabled are off)") from None
            raise rpc_error(what, addr, exc) from None
        if hasattr(response, "code") and response.code != ResponseCode.SUCCESS:
            raise business_error(f"{what} on {broker_name}", addr, response.code, response.remark)
        return response

    def create_user(self, username: str, password: str, user_type: str = "", cluster: str | None = None,
                    brokers: list[str] | None = None) -> list[str]:
        return [n for n, _ in self._call(f"create user {username}", "CreateUser", acl_pb2.AclUser(
            username=username, password=password, user_type=user_type), cluster, brokers)]

    def update_user(self, username: str, password: str = "", user_type: str = "", cluster: str | None = None,
                    brokers: list[str] | None = None) -> list[str]:
        return [n for n, _ in self._call(f"update user {username}", "UpdateUser", acl_pb2.AclUser(
            username=username, password=password, user_type=user_type), cluster, brokers)]

    def delete_user(self, username: str, cluster: str | None = None, brokers: list[str] | None = None) -> list[str]:
        return [n for n, _ in self._call(f"delete user {username}", "DeleteUser",
                                         acl_pb2.AclUserRequest(username=username), cluster, brokers)]

    def list_users(self, cluster: str | None = None, brokers: list[str] | None = None,
                   username: str = "") -> dict[str, list[tuple[str, str]]]:
        """{broker: [(username, user type)]} (passwords are never listed)."""
        return {n: [(u.username, u.user_type) for u in r.users] for n, r in self._call(
            "list users", "ListUser", acl_pb2.AclListRequest(filter=username), cluster, brokers)}

    def create_acl(self, subject: str, resources: Sequence[str], actions: Sequence[str], decision: str = "Allow",
                   cluster: str | None = None, brokers: list[str] | None = None) -> list[str]:
        entries = [acl_pb2.AclEntry(resource=r, actions=list(actions), decision=decision) for r in resources]
        return [n for n, _ in self._call(f"create acl of {subject}", "CreateAcl", acl_pb2.AclPolicy(
            subject=subject, entries=entries), cluster, brokers)]

    def delete_acl(self, subject: str, resource: str = "", cluster: str | None = None,
                   brokers: list[str] | None = None) -> list[str]:
        return [n for n, _ in self._call(f"delete acl of {subject}", "DeleteAcl", acl_pb2.AclDeleteRequest(
            subject=subject, resource=resource), cluster, brokers)]

    def list_acls(self, cluster: str | None = None, brokers: list[str] | None = None,
                  subject: str = "") -> dict[str, list[tuple[str, str, list[str], str]]]:
        """{broker: [(subject, resource, actions, decision)]}."""
        return {n: [(p.subject, e.resource, list(e.actions), e.decision) for p in r.policies for e in p.entries]
                for n, r in self._call("list acls", "ListAcl", acl_pb2.AclListRequest(filter=subject), cluster,
                                       brokers)}
