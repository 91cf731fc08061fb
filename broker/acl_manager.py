"""The broker's ACL tables (users and policies, kept in its metadata store) and their admin RPCs (AclService)."""

import json
import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import grpc

from broker.metadata.data_version import DataVersion
from broker.metadata.metadata_codec import policy_to_doc, user_to_doc
from broker.metadata.metadata_store import SECRET_FILE_MODE, MetadataStore
from common.acl import (
    ADMIN,
    DATE_KEY,
    AclEntry,
    AclError,
    Authority,
    Policy,
    User,
    check_access_key,
    checked_resource,
    normalize_actions,
    normalize_decision,
    normalize_resource,
    normalize_user_type,
    parse_authorization,
    verify,
)
from common.atomic_file import write_file_atomically
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.rpc_boundary import rpc_boundary
from proto import acl_pb2, acl_pb2_grpc, common_pb2

log = logging.getLogger(__name__)
USER_PREFIX = "User:"


class AclManager(Authority):
    """Users and policies in memory, every change written to the metadata store first. The inner credentials
    (what brokers present to each other) count as a super user that is never stored."""

    def __init__(self, users: MetadataStore[str, User], acls: MetadataStore[str, Policy],
                 inner: tuple[str, str] | None = None, kept_dir: Path | None = None) -> None:
        super().__init__([User(inner[0], inner[1], "Super")] if inner else [])
        self.users_store = users
        self.acls_store = acls
        self.users: dict[str, User] = {}
        self.policies: dict[str, Policy] = {}
        self.data_version = DataVersion()  # moved by every change: a slave copies the tables when it moves
        # A replica whose master could not give its tables (one that predates GetAclCopy): its own may lack the
        # group's users (said when it is elected).
        self.unconfirmed = False
        self.kept_dir = kept_dir  # where a replica keeps its own tables a copy replaced (keep_replaced)
        self._lock = threading.RLock()
        users.bind(lambda: list(self.users.values()))
        acls.bind(lambda: list(self.policies.values()))

    def load(self, init_user: tuple[str, str] | None) -> None:
        with self._lock:
            self.users = {u.username: u for u in self.users_store.load()}
            self.policies = {p.subject: p for p in self.acls_store.load()}
            if init_user is not None and init_user[0] not in self.users:
                self.put_user(User(init_user[0], init_user[1], "Super"))
                log.info("acl_init_user_created username=%s", init_user[0])
        log.info("acl_loaded users=%d policies=%d", len(self.users), len(self.policies))

    # -- Authority ----------------------------------------------------------------------------------------------
    def user(self, access_key: str) -> User | None:
        return super().user(access_key) or self.users.get(access_key)

    def entries(self, username: str) -> tuple[AclEntry, ...]:
        p = self.policies.get(USER_PREFIX + username)
        return p.entries if p is not None else ()

    # -- changes ------------------------------------------------------------------------------------------------
    def put_user(self, user: User) -> None:
        with self._lock:
            old = self.users.get(user.username)
            self.data_version.next()
            self.users[user.username] = user  # first: the JSON store writes the table it reads back
            try:
                self.users_store.put([user])
            except BaseException:
                _restore(self.users, user.username, old)
                raise

    def delete_user(self, username: str) -> None:
        with self._lock:
            self.data_version.next()
            self.users.pop(username, None)
            self.users_store.delete([username])
            if USER_PREFIX + username in self.policies:
                self.policies.pop(USER_PREFIX + username, None)
                self.acls_store.delete([USER_PREFIX + username])

    def add_entries(self, subject: str, entries: tuple[AclEntry, ...]) -> Policy:
        """Entries on a resource already in the policy replace it (the other entries stay). The subject must be a
        user (as upstream: a policy of nobody would wait for whoever is created with that name later)."""
        with self._lock:  # the check under the lock: a deleteUser meanwhile would leave the policy behind
            if self.user(subject[len(USER_PREFIX):]) is None:
                raise Refusal(ResponseCode.INVALID_PARAMETER, f"subject {subject} does not exist (createUser first)")
            old = self.policies.get(subject)
            resources = {e.resource for e in entries}
            kept = tuple(e for e in (old.entries if old else ()) if e.resource not in resources)
            policy = Policy(subject, kept + entries)
            self.data_version.next()
            self.policies[subject] = policy
            try:
                self.acls_store.put([policy])
            except BaseException:
                _restore(self.policies, subject, old)
                raise
            return policy

    def delete_entries(self, subject: str, resource: str) -> bool:
        with self._lock:
            old = self.policies.get(subject)
            if old is None:
                return False
            self.data_version.next()
            kept = tuple(e for e in old.entries if resource and e.resource != resource)
            if kept:
                policy = Policy(subject, kept)
                self.policies[subject] = policy
                self.acls_store.put([policy])
            else:
                self.policies.pop(subject, None)
                self.acls_store.delete([subject])
            return len(kept) != len(old.entries)

    # -- a slave's copy of its master's tables -----------------------------------------------------------------
    def snapshot(self) -> tuple[list[User], list[Policy], DataVersion]:
        """Every user (secrets included) and policy, and the version they are of."""
        with self._lock:
            version = DataVersion(self.data_version.state_version, self.data_version.counter)
            return list(self.users.values()), list(self.policies.values()), version

    def keep_replaced(self, users: list[User], policies: list[Policy]) -> Path | None:
        """Write ``users`` and ``policies`` (a replica's own, its master's copy replaces them) to a file beside the
        tables, readable by this user only; where it went (None: nowhere to keep them)."""
        if self.kept_dir is None:
            return None
        path = self.kept_dir / f"acl-replaced-{time.strftime('%Y%m%dT%H%M%S')}.json"
        doc = {"users": [user_to_doc(u) for u in users], "acls": [policy_to_doc(p) for p in policies]}
        write_file_atomically(path, json.dumps(doc, indent=1).encode(), SECRET_FILE_MODE)
        return path

    def replace_all(self, users: Iterable[User], policies: Iterable[Policy]) -> int:
        """The tables become ``users`` and ``policies`` (a slave's copy of its master's), in memory at once and
        in the store before this returns (a failed write puts memory back: the next copy tries again); how many
        users and policies changed or went."""
        new_users = {u.username: u for u in users}
        new_policies = {p.subject: p for p in policies}
        with self._lock:
            old_users, old_policies = self.users, self.policies
            users_changed = [u for name, u in new_users.items() if old_users.get(name) != u]
            users_gone = [name for name in old_users if name not in new_users]
            policies_changed = [p for subject, p in new_policies.items() if old_policies.get(subject) != p]
            policies_gone = [subject for subject in old_policies if subject not in new_policies]
            changes = len(users_changed) + len(users_gone) + len(policies_changed) + len(policies_gone)
            if not changes:
                return 0
            self.data_version.next()
            self.users, self.policies = new_users, new_policies  # first: the JSON store writes what it reads back
            try:
                if users_changed:
                    self.users_store.put(users_changed)
                if users_gone:
                    self.users_store.delete(users_gone)
                if policies_changed:
                    self.acls_store.put(policies_changed)
                if policies_gone:
                    self.acls_store.delete(policies_gone)
            except BaseException:
                self.users, self.policies = old_users, old_policies
                raise
            return changes

    def flush(self) -> None:
        self.users_store.flush()
        self.acls_store.flush()


def _restore(table: dict, key: str, old: object) -> None:
    if old is None:
        table.pop(key, None)
    else:
        table[key] = old


def _policy_proto(p: Policy) -> acl_pb2.AclPolicy:
    return acl_pb2.AclPolicy(subject=p.subject, entries=[
        acl_pb2.AclEntry(resource=e.resource, actions=list(e.actions), decision=e.decision) for e in p.entries])


def policy_from_proto(p: acl_pb2.AclPolicy) -> Policy:
    return Policy(p.subject, tuple(AclEntry(e.resource, tuple(e.actions), e.decision) for e in p.entries))


def _subject(raw: str) -> str:
    raw = raw.strip()
    if not raw.startswith(USER_PREFIX) or not raw[len(USER_PREFIX):].strip():
        raise RequestError(f"subject {raw!r} is not User:NAME")
    return raw


def _nothing_to_delete(acl: AclManager, subject: str, resource: str) -> str:
    if acl.user(subject[len(USER_PREFIX):]) is None:
        return f"subject {subject} does not exist: no ACL to delete"
    return f"no ACL of {subject}" + (f" on {resource}" if resource else "")


@rpc_boundary(acl_pb2.DESCRIPTOR.services_by_name["AclService"])
class AclServicer(acl_pb2_grpc.AclServiceServicer):
    """Admin-only (the interceptor lets only super users through)."""

    def __init__(self, acl: AclManager) -> None:
        self.acl = acl

    async def CreateUser(self, request, context):
        user = self._user(request)
        if user.username in self.acl.users:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"user {user.username!r} already exists (use updateUser)")
        self.acl.put_user(user)
        return acl_pb2.AclCommandResponse(code=ResponseCode.SUCCESS)

    async def UpdateUser(self, request, context):
        if not request.password and not request.user_type:
            raise RequestError("updateUser has nothing to update: give a password or a user type")
        old = self.acl.users.get(request.username)
        if old is None:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"user {request.username!r} does not exist (use createUser)")
        user = User(old.username, request.password or old.password,
                    normalize_user_type(request.user_type) if request.user_type else old.user_type)
        self.acl.put_user(user)
        return acl_pb2.AclCommandResponse(code=ResponseCode.SUCCESS)

    async def DeleteUser(self, request, context):
        if request.username not in self.acl.users:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"user {request.username!r} does not exist")
        self.acl.delete_user(request.username)
        return acl_pb2.AclCommandResponse(code=ResponseCode.SUCCESS)

    async def ListUser(self, request, context):
        users = [u for name, u in sorted(self.acl.users.items()) if not request.filter or name == request.filter]
        return acl_pb2.AclUserList(users=[acl_pb2.AclUser(username=u.username, user_type=u.user_type)
                                          for u in users])

    async def CreateAcl(self, request, context):
        subject = _subject(request.subject)
        if not request.entries:
            raise RequestError("createAcl needs at least one entry (resource, actions, decision)")
        try:
            entries = tuple(AclEntry(checked_resource(e.resource), normalize_actions(e.actions),
                                     normalize_decision(e.decision)) for e in request.entries)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        self.acl.add_entries(subject, entries)
        return acl_pb2.AclCommandResponse(code=ResponseCode.SUCCESS)

    async def DeleteAcl(self, request, context):
        subject = _subject(request.subject)
        try:  # only the shape: an entry stored before names were checked can still be deleted
            resource = normalize_resource(request.resource) if request.resource else ""
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        if not self.acl.delete_entries(subject, resource):
            raise Refusal(ResponseCode.INVALID_PARAMETER, _nothing_to_delete(self.acl, subject, resource))
        return acl_pb2.AclCommandResponse(code=ResponseCode.SUCCESS)

    async def ListAcl(self, request, context):
        policies = [p for s, p in sorted(self.acl.policies.items()) if not request.filter or s == request.filter
                    or s == USER_PREFIX + request.filter]
        return acl_pb2.AclPolicyList(policies=[_policy_proto(p) for p in policies])

    async def GetAclCopy(self, request, context):
        """Everything, secrets included, for a replica's copy: only to a call whose signature verifies here (with
        authorization alone on, the interceptor trusted the user a call names) and whose signer is a super user
        (the inner credentials, root)."""
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        try:
            self.acl.check(verify(metadata, self.acl.secret_of), ADMIN, (), "GetAclCopy")
        except AclError as exc:
            await context.abort(exc.status, str(exc))
        users, policies, version = self.acl.snapshot()
        return acl_pb2.AclCopy(
            users=[acl_pb2.AclUser(username=u.username, password=u.password, user_type=u.user_type) for u in users],
            policies=[_policy_proto(p) for p in policies],
            data_version=common_pb2.DataVersion(state_version=version.state_version, counter=version.counter))

    async def Authorize(self, request, context):
        """mqproxy's question about one v2 call: authentic (verified here, where the secrets are) and allowed?"""
        try:
            if request.authenticate:
                username = verify({"authorization": request.authorization, DATE_KEY: request.date_time},
                                  self.acl.secret_of)
            else:
                if not request.authorization:
                    raise AclError(grpc.StatusCode.UNAUTHENTICATED, "authorization needs a signed request: no "
                                                                    "authorization metadata")
                username = parse_authorization(request.authorization)[0]
            if request.authorize and request.action:
                self.acl.check(username, request.action, list(request.resources), request.method or "?")
        except AclError as exc:
            return acl_pb2.AclAuthorizeResponse(status=exc.status.value[0], message=str(exc))
        return acl_pb2.AclAuthorizeResponse(status=grpc.StatusCode.OK.value[0], username=username)

    def _user(self, request: acl_pb2.AclUser) -> User:
        if not request.username or not request.password:
            raise RequestError("a user needs a username and a password")
        try:
            check_access_key(request.username, "username")  # the access key its requests are signed with
            return User(request.username, request.password, normalize_user_type(request.user_type))
        except ValueError as exc:
            raise RequestError(str(exc)) from None


