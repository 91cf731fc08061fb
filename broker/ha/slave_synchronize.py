"""A slave copies its master's topic configs, static topic mappings, subscription groups, ACL users and policies,
consumer offsets, POP state and (a controller-mode replica's) tier (upstream's SlaveSynchronize): every
``SYNC_INTERVAL_S`` and as soon as the master's address is known, and POP state alone in between, every
``POP_COPY_INTERVAL_S`` when it changed.
Topics, mappings and offsets the master no longer has are deleted here too, and groups it dropped since a copy.
Once stopped (this broker is promoted, or follows another master), nothing more of a copy is applied, even one whose
calls were under way (the thread is not waited for: a hung master would hold a promotion up). Offsets are as of the
last copy: a consumer reading from the slave while the master is down, or from a promoted slave, may read again
what was committed since (at-least-once). So is POP state: a promoted slave hands out again what was popped since
the copy, and again once its invisible time passes what was acked since; what was in flight or acked before the
copy, never too early.

Topic configs come as what changed since the slave's copy (``GetTopicConfigChanges``; the whole table for a first
copy): with millions of topics, the whole table every time kept the master's loop busy for seconds.

Between copies the slave watches its master's topic, mapping, subscription group and ACL versions
(``WaitMetadataChange``, a long poll) and copies those four as soon as they move: what a promoted slave needs to serve
what was acknowledged (a delayed message's topic, a KV shard's mapping made at the store's first use, a FIFO group's
order: without it a promoted slave took the group for an unordered one and handed a message group out to every
consumer at once) and whom to serve (ACL: a promoted slave knew only its bootstrap user and refused everyone else)
reaches it within milliseconds, not at the next copy. Offsets and POP state keep the copies' schedule.

Why copied and not replicated as commitlog records: these tables change rarely and are small, a copy converges
whatever happened before (a slave that missed changes, a restored store), and the commitlog's byte-for-byte copy
stays free of records only the broker itself reads. The cost is the window between a change and its copy: for
topics, mappings and groups the watch's round trip (a master dying in it loses the change, as an ASYNC_MASTER loses its
last messages; a topic created then is created again by the next ``updateTopic``, a mapping change re-applied by
the operator's retried command, which is idempotent); for the rest up to ``SYNC_INTERVAL_S``."""

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

import grpc

from broker.acl_manager import AclManager, policy_from_proto
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from broker.metadata.subscription_group_manager import SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.periodic_service import FailedPassLog
from broker.tiered.metadata.tiered_metadata_store import TieredMetadataCopy
from broker.tiered.provider.file_segment import is_backend_error
from broker.tiered.replica.tier_role import MasterTier
from common import tls
from common.acl import Policy, User, inner_metadata
from common.response_code import ResponseCode
from common.statictopic.mapping_codec import detail_from_proto
from common.topic_config import TopicConfig
from common.topic_config_codec import topic_config_from_proto
from proto import (
    acl_pb2,
    acl_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    pop_pb2,
    pop_pb2_grpc,
    tiered_pb2,
    tiered_pb2_grpc,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class TierCopies(Protocol):
    """A controller-mode replica's tier, which follows its master's (``broker/tiered/replica/tier_role.py``)."""

    def follows_master(self) -> bool:
        """Whether the master's tier is still wanted (not once this replica uploads to a backend of its own)."""

    def copied_version(self) -> str:
        """The version of the master's tier metadata installed last ("": none): the next copy carries what changed."""

    def follow_master(self, master: MasterTier | None) -> None:
        """A copy of the master's tier (None: the master has no tiered storage)."""


_UNANSWERED = object()  # the master gave no copy of its tier this time (an older release, a refusal)


class PopStateCopies(Protocol):
    """Where a slave keeps its copy of the master's POP state."""

    def copied_from(self) -> str:
        """The master's state version the slave's state is an unchanged copy of ("": none)."""

    def install(self, snapshot: bytes, still_following: Callable[[], bool], version: str) -> bool:
        """The slave's POP state becomes ``snapshot``; False if it no longer follows (checked under POP's lock)."""


SYNC_INTERVAL_S = 5.0  # upstream's syncBrokerMetadataPeriod in controller mode
FIRST_SYNC_RETRY_S = 0.2
# POP state changes with every pop and ack, and what changed since the last copy is handed out again after a
# failover: it is asked for every second ("unchanged" costs the master nothing), but a copy that took t waits at
# least t / POP_COPY_SHARE, so copying a large state takes no more than that share of either broker's time.
POP_COPY_INTERVAL_S = 1.0
POP_COPY_SHARE = 0.05
# Per call: a hung master must not keep the copy thread (and its channel) for long once this broker stops following
# it (nothing it answers later is applied: see shutdown). What may be a large whole state (a first copy of millions
# of topics, POP state, the tier's metadata) takes seconds to encode and send: those calls have more time.
RPC_TIMEOUT_S = 5.0
BULK_TIMEOUT_S = 30.0


class CopyStopped(Exception):
    """The copy was stopped (promotion, another master, shutdown) before this piece of it was applied."""


class SlaveSynchronize(threading.Thread):
    def __init__(self, master_addr: Callable[[], str], topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, on_topics_changed: Callable[[], None],
                 mappings: TopicQueueMappingManager | None = None,
                 pop_state: PopStateCopies | None = None, tier: TierCopies | None = None,
                 acl: AclManager | None = None) -> None:
        super().__init__(name="slave-synchronize", daemon=True)
        self.master_addr = master_addr
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.on_topics_changed = on_topics_changed
        self.mappings = mappings
        self.pop_state = pop_state
        self.tier = tier
        self.acl = acl  # ACL on here: the master's users and policies are copied (a promoted slave serves them)
        # Called once the first copy's topics, mappings, groups and ACLs are applied: the replica may join the
        # in-sync set from then on (``HAClient.metadata_copied``).
        self.on_first_copy: Callable[[], None] = lambda: None
        self._stopped = threading.Event()
        # Held while a piece of a copy is checked and applied; shutdown takes it after setting _stopped, so once
        # shutdown returns nothing of the old master's is ever written here (the thread itself is not waited for).
        self._applying = threading.Lock()
        self._synced_from = ""
        self._topics_copied: tuple[str, common_pb2.DataVersion] | None = None  # (master, version) of the copy
        self._mappings_copied: tuple[str, common_pb2.DataVersion] | None = None
        self._groups_copied: set[str] = set()  # the groups the last copy held: only those go when the master drops one
        self._group_version_copied: tuple[str, common_pb2.DataVersion] | None = None
        self._acls_copied: tuple[str, common_pb2.DataVersion] | None = None
        self._acls_copied_once = False  # since this broker started: its tables before may be its own
        self._unversioned = b""  # the last copy of a master that names no versions (an older release)
        self._unwatchable: set[str] = set()  # masters of an older release (no WaitMetadataChange)
        self._watch_channel: tuple[str, grpc.Channel] | None = None
        self._failures = FailedPassLog(log, "slave_sync_failed")

    def run(self) -> None:
        next_sync = next_pop_copy = time.monotonic()
        try:
            while not self._stopped.is_set():
                self._wait_watching(min(next_sync, next_pop_copy))
                if self._stopped.is_set():
                    return
                next_sync, next_pop_copy = self._step(next_sync, next_pop_copy)
        finally:
            self._close_watch_channel()

    def _step(self, next_sync: float, next_pop_copy: float) -> tuple[float, float]:
        """The copy due now, if any; when the next ones are due."""
        addr = self.master_addr()
        now = time.monotonic()
        if not addr:
            return now + FIRST_SYNC_RETRY_S, now + FIRST_SYNC_RETRY_S
        if now >= next_sync:
            if self._guarded(addr, self.sync_all):
                self._synced_from = addr
            next_sync = now + (SYNC_INTERVAL_S if self._synced_from else FIRST_SYNC_RETRY_S)
            next_pop_copy = time.monotonic() + POP_COPY_INTERVAL_S  # sync_all copied POP state too
        elif now >= next_pop_copy:
            self._guarded(addr, self.copy_pop_state)
            took = time.monotonic() - now
            next_pop_copy = now + took + max(POP_COPY_INTERVAL_S, took / POP_COPY_SHARE)
        return next_sync, next_pop_copy

    # -- the watch: topics and mappings copied as soon as they change ------------------------------
    def _wait_watching(self, until: float) -> None:
        """Until ``until``, watching the master's topics and mappings (once a copy of it was taken), which are
        copied as soon as they change: what a master made in its last seconds (a topic, a KV shard's mapping) is
        then on the slave it fails over to, not lost with it."""
        left = until - time.monotonic()
        addr = self._synced_from
        if left > 0 and addr and addr == self.master_addr() and addr not in self._unwatchable:
            if self._watch(addr, left):
                return
            left = until - time.monotonic()  # no answer: the copies' own schedule only (they say why it failed)
        if left > 0:
            self._stopped.wait(left)

    def _watch(self, addr: str, wait_s: float) -> bool:
        """One watch call, and the copy of what it says changed; False when the master did not answer."""
        known = broker_pb2.MetadataVersions(topics=self._copied_version(self._topics_copied, addr),
                                            mappings=self._copied_version(self._mappings_copied, addr),
                                            groups=self._copied_version(self._group_version_copied, addr))
        if self.acl is not None:
            known.acls.CopyFrom(self._copied_version(self._acls_copied, addr))
        try:
            answer = broker_pb2_grpc.BrokerServiceStub(self._watch_channel_to(addr)).WaitMetadataChange(
                broker_pb2.MetadataChangeRequest(known=known, wait_ms=int(wait_s * 1000)),
                timeout=wait_s + RPC_TIMEOUT_S, metadata=inner_metadata())
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                self._unwatchable.add(addr)  # a master of an older release: its copies every SYNC_INTERVAL_S only
            return False
        if answer != known:
            return self._guarded(addr, lambda a: self.copy_metadata(
                a, topics=answer.topics != known.topics, mappings=answer.mappings != known.mappings,
                groups=answer.HasField("groups") and answer.groups != known.groups,
                acls=answer.HasField("acls") and answer.acls != known.acls))
        return True

    @staticmethod
    def _copied_version(copied: tuple[str, common_pb2.DataVersion] | None, addr: str) -> common_pb2.DataVersion:
        return copied[1] if copied is not None and copied[0] == addr else common_pb2.DataVersion()

    def copy_metadata(self, addr: str, *, topics: bool, mappings: bool, groups: bool = False,
                      acls: bool = False) -> None:
        """The master's topic changes, its mappings, its groups, its ACL tables (what its watch answered changed)."""
        channel = self._watch_channel_to(addr)
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        signed = _signed()
        topic_changes = self._fetch_topic_changes(stub, addr, signed) if topics else None
        mapping_list = stub.GetAllTopicQueueMapping(common_pb2.Empty(), **signed) if mappings else None
        group_list = stub.GetAllSubscriptionGroup(common_pb2.Empty(), **signed) if groups else None
        acl_copy = self._fetch_acls(channel, signed) if acls else None
        if acl_copy is not None:
            self._apply("acls", lambda: self._copy_acls(addr, acl_copy))
        mappings_changed = 0 if mapping_list is None else \
            self._apply("mappings", lambda: self._copy_mappings(addr, mapping_list))
        changed, gone = ([], []) if topic_changes is None else \
            self._apply("topics", lambda: self._copy_topics(addr, topic_changes))
        groups_changed, groups_gone = ([], []) if group_list is None else \
            self._apply("groups", lambda: self._copy_group_list(addr, group_list))
        if changed or gone or mappings_changed or groups_changed or groups_gone:
            log.info("slave_metadata_copied master=%s topics_changed=%d topics_deleted=%d mappings_changed=%d "
                     "groups_changed=%d groups_deleted=%d", addr, len(changed), len(gone), mappings_changed,
                     len(groups_changed), len(groups_gone))
        if changed or gone or mappings_changed:
            self.on_topics_changed()

    def _watch_channel_to(self, addr: str) -> grpc.Channel:
        """One channel for the watch's calls (about one a second), kept while the master stays."""
        if self._watch_channel is None or self._watch_channel[0] != addr:
            self._close_watch_channel()
            self._watch_channel = (addr, _master_channel(addr))
        return self._watch_channel[1]

    def _close_watch_channel(self) -> None:
        if self._watch_channel is not None:
            self._watch_channel[1].close()
            self._watch_channel = None

    def _guarded(self, addr: str, step: Callable[[str], None]) -> bool:
        try:
            step(addr)
            self._failures.succeeded()
            return True
        except CopyStopped as exc:
            log.info("slave_sync_abandoned master=%s before=%s reason=stopped", addr, exc)
        except grpc.RpcError as exc:
            log.warning("slave_sync_failed master=%s status=%s", addr, exc.code().name)
        except Exception as exc:  # a copy this slave cannot take: said, and tried again next time (the thread goes on)
            self._failures.failed(exc)  # a full disk's on one line, once while it lasts (it failed every 200 ms)
        return False

    def copy_pop_state(self, addr: str) -> None:
        """The master's POP state alone, when it changed (between the copies of everything)."""
        if self.pop_state is None:
            return
        with _master_channel(addr) as channel:
            snapshot = self._fetch_pop_state(channel, _signed())
        self._apply("pop_state", lambda: self._copy_pop_state(addr, snapshot))

    def sync_all(self, addr: str) -> None:
        with _master_channel(addr) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            empty, signed = common_pb2.Empty(), _signed()
            topics = self._fetch_topic_changes(stub, addr, signed)
            groups = stub.GetAllSubscriptionGroup(empty, **_bulk(signed))  # whole tables: the bulk timeout
            offsets = stub.GetAllConsumerOffsets(empty, **_bulk(signed)).offsets
            mappings = stub.GetAllTopicQueueMapping(empty, **_bulk(signed))
            pop_state = self._fetch_pop_state(channel, signed)
            tier = self._fetch_tier(channel, signed)
            acl_copy = self._fetch_acls(channel, signed)
        if acl_copy is not None:
            self._apply("acls", lambda: self._copy_acls(addr, acl_copy))
        mappings_changed = self._apply("mappings", lambda: self._copy_mappings(addr, mappings))
        changed, gone = self._apply("topics", lambda: self._copy_topics(addr, topics))
        groups_changed, groups_gone = self._apply("groups", lambda: self._copy_group_list(addr, groups))
        if not self._synced_from:
            self.on_first_copy()
        self._apply("offsets", lambda: self._copy_offsets(offsets))
        self._apply("pop_state", lambda: self._copy_pop_state(addr, pop_state))
        self._check_following("tier")  # (its own role lock fences the rest: a backend read is not waited for here)
        self._copy_tier(addr, tier)
        if changed or gone or mappings_changed or groups_changed or groups_gone:
            log.info("slave_synced master=%s topics_changed=%d topics_deleted=%d groups_changed=%d groups_deleted=%d "
                     "mappings_changed=%d", addr, len(changed), len(gone), len(groups_changed), len(groups_gone),
                     mappings_changed)
        if changed or gone or mappings_changed:
            self.on_topics_changed()

    def _check_following(self, what: str) -> None:
        """Before a piece of a copy is applied: CopyStopped once this broker stopped following the master it came
        from (promoted, following another, shutting down). The old master's tables must never land in a master."""
        if self._stopped.is_set():
            raise CopyStopped(what)

    def _apply(self, what: str, step: Callable[[], T]) -> T:
        """``step`` (one piece of a copy), unless stopped: checked and applied under the lock shutdown takes, so a
        piece is applied before shutdown returns or not at all."""
        with self._applying:
            self._check_following(what)
            return step()

    def _copy_group_list(self, addr: str, answer: broker_pb2.SubscriptionGroupList) -> tuple[list[str], list[str]]:
        self._group_version_copied = None  # until this copy is applied whole
        copied = self._copy_groups(answer.groups)
        if answer.HasField("data_version"):
            self._group_version_copied = (addr, answer.data_version)
        return copied

    def _copy_groups(self, groups: Iterable[broker_pb2.SubscriptionGroupConfig]) -> tuple[list[str], list[str]]:
        """The master's subscription groups; one a previous copy held that the master no longer has is deleted
        here (a group deleted on the master came back after a failover). A group made here by a read (a pull with
        slaveReadEnable auto-creates it), never in a copy, stays: deleted, the next pull made it again, and the
        group table was rewritten every copy."""
        theirs = {g.group_name: _group_config(g) for g in groups}
        table = self.groups.subscription_group_table
        changed = [name for name, config in theirs.items() if table.get(name) != config]
        for name in changed:
            self.groups.update(theirs[name])
        gone = [name for name in self._groups_copied if name not in theirs and name in table]
        for name in gone:
            self.groups.delete(name)
        self._groups_copied = set(theirs)
        return changed, gone

    def _fetch_acls(self, channel: grpc.Channel, signed: dict) -> acl_pb2.AclCopy | None:
        """The master's users and policies (None: ACL is off here, or on the master, which then serves no ACL)."""
        if self.acl is None:
            return None
        try:
            return acl_pb2_grpc.AclServiceStub(channel).GetAclCopy(common_pb2.Empty(), **_bulk(signed))
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            if not self.acl.unconfirmed:  # once, until a master gives its tables
                log.warning("slave_acls_not_copied reason='the master predates GetAclCopy (a rolling upgrade): this "
                            "replica keeps its own users and policies, which may lack the master's; upgrade the "
                            "master, or create its users here too, before this replica is elected'")
            self.acl.unconfirmed = True
            return None

    def _copy_acls(self, addr: str, answer: acl_pb2.AclCopy) -> None:
        """The master's users and policies replace this slave's (the bootstrap user it made at its first start
        too: the master's is the one that counts). The first copy since this broker started replaces tables that
        may be its own (a master before, rejoining as a replica of one elected in a rolling upgrade, which lacks
        them): what it drops is kept in a file beside them and said (lost for good before)."""
        assert self.acl is not None
        self._acls_copied = None  # until this copy is applied whole
        users = [User(u.username, u.password, u.user_type) for u in answer.users]
        policies = [policy_from_proto(p) for p in answer.policies]
        if not self._acls_copied_once:
            self._keep_dropped_acls(users, policies)
        changed = self.acl.replace_all(users, policies)
        self._acls_copied_once = True
        self.acl.unconfirmed = False
        if answer.HasField("data_version"):
            self._acls_copied = (addr, answer.data_version)
        if changed:
            log.info("slave_acls_copied master=%s users=%d policies=%d changed=%d", addr, len(answer.users),
                     len(answer.policies), changed)

    def _keep_dropped_acls(self, users: list[User], policies: list[Policy]) -> None:
        assert self.acl is not None
        own_users, own_policies, _ = self.acl.snapshot()
        names, subjects = {u.username for u in users}, {p.subject for p in policies}
        dropped_users = [u for u in own_users if u.username not in names]
        dropped_policies = [p for p in own_policies if p.subject not in subjects]
        if dropped_users or dropped_policies:
            kept = self.acl.keep_replaced(dropped_users, dropped_policies)
            log.warning("acl_own_tables_replaced users=%s policies=%d kept_in=%s: this broker's own users and "
                        "policies its master lacks are gone from its tables (create them on the master with mqadmin "
                        "if they are wanted)", ",".join(sorted(u.username for u in dropped_users)) or "-",
                        len(dropped_policies), kept)

    def _copy_offsets(self, offsets: Iterable[broker_pb2.ConsumerOffsetEntry]) -> None:
        theirs = set()
        for o in offsets:
            theirs.add((o.group, o.topic, o.queue_id))
            if self.offsets.query_offset(o.group, o.topic, o.queue_id) != o.offset and o.offset >= 0:
                self.offsets.commit_offset(o.group, o.topic, o.queue_id, o.offset)
        # offsets the master forgot (a reused static-topic queue, a deleted group's topics) go here too: after a
        # failover they would otherwise come back
        self.offsets.delete_offsets([(g, t, q) for g, t, q, _o in self.offsets.all_offsets()
                                     if (g, t, q) not in theirs])

    def _fetch_topic_changes(self, stub: broker_pb2_grpc.BrokerServiceStub, addr: str,
                             signed: dict) -> broker_pb2.TopicConfigChanges:
        """The master's topic configs changed since this slave's copy (the whole table for a first copy, or from a
        master of an older release)."""
        copied = self._topics_copied
        since = copied[1] if copied is not None and copied[0] == addr else None
        whole = _bulk(signed)
        try:
            return stub.GetTopicConfigChanges(broker_pb2.TopicConfigChangesRequest(since=since),
                                              **(signed if since is not None else whole))
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                raise
        return broker_pb2.TopicConfigChanges(configs=stub.GetAllTopicConfig(common_pb2.Empty(), **whole).configs,
                                             whole=True)

    def _copy_topics(self, addr: str, topics: broker_pb2.TopicConfigChanges) -> tuple[list[TopicConfig], list[str]]:
        """Applies the master's changes (or its whole table: what it lacks goes); the configs changed and the
        topics deleted here."""
        self._topics_copied = None  # until this copy is applied whole
        masters = {c.topic_name: topic_config_from_proto(c) for c in topics.configs}
        select = self.topics.select
        changed = [c for name, c in masters.items() if select(name) != c]
        if topics.whole:
            gone = [c.topic_name for c in self.topics.all_configs() if c.topic_name not in masters]
        else:
            gone = [name for name in topics.deleted if select(name) is not None]
        if changed:
            self.topics.update_many(changed)
        for name in gone:
            self.topics.delete(name)
        if topics.HasField("data_version"):
            self._topics_copied = (addr, topics.data_version)
        return changed, gone

    def _fetch_pop_state(self, channel: grpc.Channel, signed: dict) -> pop_pb2.PopStateSnapshot | None:
        """The master's POP state, unless the copy here is of its current version (answered "unchanged")."""
        if self.pop_state is None:
            return None
        known = self.pop_state.copied_from()
        try:
            answer = pop_pb2_grpc.PopServiceStub(channel).GetPopState(pop_pb2.PopStateRequest(known_version=known),
                                                                       **_bulk(signed))
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            return None  # a master of an older release: its slave copies the rest
        if answer.unchanged and (not known or answer.version != known):  # not what was asked: no copy this time
            log.warning("slave_pop_state_answer_odd known=%r unchanged_version=%r", known, answer.version)
            return None
        return answer

    def _copy_pop_state(self, addr: str, snapshot: pop_pb2.PopStateSnapshot | None) -> None:
        if self.pop_state is None or snapshot is None or snapshot.unchanged:
            return
        if not snapshot.version and snapshot.records == self._unversioned:
            return  # an older master (it names no versions): an identical copy is not installed again
        if self.pop_state.install(snapshot.records, lambda: not self._stopped.is_set(), snapshot.version):
            self._unversioned = b"" if snapshot.version else snapshot.records
            log.info("slave_pop_state_copied master=%s version=%s bytes=%d", addr, snapshot.version,
                     len(snapshot.records))

    def _fetch_tier(self, channel: grpc.Channel, signed: dict) -> object:
        """The master's tier (None if it has none), or ``_UNANSWERED``."""
        if self.tier is None or not self.tier.follows_master():
            return _UNANSWERED
        try:
            answer = tiered_pb2_grpc.TieredServiceStub(channel).GetTierCopy(
                tiered_pb2.TierCopyRequest(known_version=self.tier.copied_version()), **_bulk(signed))
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            return _UNANSWERED  # an older master: whether it shares this replica's backend is not known
        if answer.code == ResponseCode.SERVICE_NOT_AVAILABLE:
            return None
        if answer.code != ResponseCode.SUCCESS:
            log.warning("slave_tier_copy_refused code=%d remark=%r", answer.code, answer.remark)
            return _UNANSWERED
        return MasterTier(answer.tier_id, TieredMetadataCopy(answer.checkpoint, answer.uploaded_end, answer.records,
                                                             answer.version, answer.whole))

    def _copy_tier(self, addr: str, master: object) -> None:
        if self.tier is None or master is _UNANSWERED:
            return
        assert master is None or isinstance(master, MasterTier)
        try:
            self.tier.follow_master(master)
        except Exception as exc:  # its backend failing (a read of its id): the next copy tries again
            log.warning("slave_tier_copy_failed master=%s error=%r", addr, exc, exc_info=not is_backend_error(exc))

    def _copy_mappings(self, addr: str, answer: broker_pb2.TopicQueueMappingList) -> int:
        self._mappings_copied = None  # until this copy is applied whole
        if self.mappings is None:  # (a broker that keeps none: the version copied is the master's all the same)
            self._mappings_copied = (addr, answer.data_version)
            return 0
        masters = [detail_from_proto(d) for d in answer.details]
        table = self.mappings.mapping_table
        theirs = {d.topic: d for d in masters}
        changed = [d for d in masters if table.get(d.topic) != d]
        for detail in changed:
            self.mappings.replace(detail)
        gone = [topic for topic in list(table) if topic not in theirs]
        for topic in gone:
            self.mappings.delete(topic)
        if answer.HasField("data_version"):
            self._mappings_copied = (addr, answer.data_version)
        return len(changed) + len(gone)

    def shutdown(self) -> None:
        """Stops the copy without waiting for the thread (it may be stuck in a call to a hung master, which
        promotion must not wait for): only for a piece being applied now. Nothing is applied after this returns."""
        self._stopped.set()
        with self._applying:
            pass


def _group_config(g: broker_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(g.group_name, g.consume_enable, g.consume_broadcast_enable, g.retry_queue_nums,
                                   g.retry_max_times, g.broker_id, g.consume_message_orderly)


def _master_channel(addr: str) -> grpc.Channel:
    return tls.channel(addr, options=[("grpc.max_receive_message_length", 1 << 30)])  # whole tables in one answer


def _signed() -> dict:
    """A call's timeout and the daemon's inner credentials."""
    return {"timeout": RPC_TIMEOUT_S, "metadata": inner_metadata()}


def _bulk(signed: dict) -> dict:
    """``signed`` for a call whose answer may be a large whole state."""
    return {**signed, "timeout": BULK_TIMEOUT_S}
