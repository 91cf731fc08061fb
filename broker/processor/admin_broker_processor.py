"""Administration: topics, subscription groups, stats, runtime info."""

import dataclasses
import enum
import importlib.metadata
import logging
import os
import time
from collections.abc import Callable

from broker.broker_config import KEYS, BrokerConfig
from broker.broker_stats import BrokerStats
from broker.metadata.consumer_offset_manager import ConsumerOffsetManager
from broker.metadata.data_version import DataVersion
from broker.metadata.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.metadata_change_watch import metadata_versions, version_proto, wait_metadata_change
from broker.processor.request_checks import checked_group, checked_topic
from broker.processor.send_message_processor import SendMessageProcessor
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.message_store import MessageStore
from broker.store.message_store_reader import MessageStoreReader
from broker.transaction.producer_manager import ProducerManager
from common.kv_shard import KV_TOPIC
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.statictopic.mapping_checks import MappingError, check_update
from common.statictopic.mapping_codec import detail_from_proto, detail_to_proto
from common.statictopic.topic_queue_mapping_detail import TopicQueueMappingDetail
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, TopicConfig
from common.topic_config_codec import topic_config_from_proto, topic_config_to_proto
from common.topic_validator import may_be_static, system_topic_refusal
from proto import broker_pb2, common_pb2

log = logging.getLogger(__name__)

MAX_TOPICS_PER_BATCH = 50_000


class AdminBrokerProcessor:
    def __init__(self, *, config: BrokerConfig, broker_addr: str, topic_config_manager: TopicConfigManager,
                 subscription_group_manager: SubscriptionGroupManager,
                 consumer_offset_manager: ConsumerOffsetManager, mapping_manager: TopicQueueMappingManager,
                 store: MessageStoreReader, local_store: MessageStore, stats: BrokerStats, boot_timestamp: int,
                 on_topics_changed: Callable[[], None],
                 timer_info: Callable[[], dict[str, str]] = dict,
                 ha_info: Callable[[], dict[str, str]] = dict,
                 producers: ProducerManager | None = None,
                 send_processor: Callable[[], SendMessageProcessor | None] = lambda: None,
                 ensure_default_topic: Callable[[], None] = lambda: None,
                 on_leadership_gained: Callable[[str, list[int]], None] = lambda _topic, _ids: None,
                 on_topic_deleted: Callable[[str], None] = lambda _topic: None,
                 on_group_deleted: Callable[[str], None] = lambda _group: None,
                 on_mapping_changed: Callable[[str], None] = lambda _topic: None,
                 acl_version: Callable[[], DataVersion | None] = lambda: None) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.consumer_offset_manager = consumer_offset_manager
        self.mapping_manager = mapping_manager
        self.store = store  # reads (the tiered facade when tiered storage is on)
        self.local_store = local_store  # this broker's commitlog and consume queues
        self.stats = stats
        self.boot_timestamp = boot_timestamp
        # the uptime on the monotonic clock (a wall clock stepped since showed it negative, or a day long)
        self._booted_at = time.monotonic() - max(0, int(time.time() * 1000) - boot_timestamp) / 1000
        self.on_topics_changed = on_topics_changed  # re-register with the name servers
        self.on_leadership_gained = on_leadership_gained  # (topic, logic ids): POP state kept from before is stale
        self.on_topic_deleted = on_topic_deleted  # the topic's POP state is stale
        self.on_group_deleted = on_group_deleted  # the group's POP state and metric series are stale
        self.on_mapping_changed = on_mapping_changed  # a static topic's parked pulls must look again
        self.timer_info = timer_info  # pending, delivered and dropped delayed messages
        self.ha_info = ha_info  # role, replication address and progress
        self.producers = producers  # producer sessions (transaction heartbeats)
        self.send_processor = send_processor  # its limits: what sends are checked against (live keys change them)
        self.ensure_default_topic = ensure_default_topic  # serve TBW102 or not, per autoCreateTopicEnable
        self.acl_version = acl_version  # of the ACL users and policies (None: ACL off), which slaves copy

    # -- topics ------------------------------------------------------------------------------------
    def _normal_topic_config(self, p: common_pb2.TopicConfig) -> TopicConfig:
        """A valid config for a topic that is not static (those change through their mapping only)."""
        config = topic_config_from_proto(p)
        try:
            config.validate()
        except ValueError as exc:
            raise RequestError(f"topic {p.topic_name[:130]!r}: {exc}") from None
        _refuse_system_topic(config.topic_name)
        if self.mapping_manager.get(config.topic_name) is not None:
            raise RequestError(f"topic {config.topic_name} is a static topic: change it with updateStaticTopic or "
                               "remappingStaticTopic, not updateTopic")
        return config

    def update_topic(self, request: broker_pb2.UpdateTopicRequest) -> common_pb2.CommandResponse:
        config = self._normal_topic_config(request.config)
        old = self.topic_config_manager.select(config.topic_name)
        self.topic_config_manager.update(config)
        self._seed_added_queues(old, config)
        self.on_topics_changed()
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def update_topics(self, request: broker_pb2.UpdateTopicListRequest) -> common_pb2.CommandResponse:
        """Create or update every topic of the request: all are checked first (one bad config and nothing
        changes), then written together (one RocksDB WriteBatch, or one rewrite of topics.json) as one
        change, and registered with the name servers once."""
        count = len(request.configs)
        if count == 0:
            raise RequestError("no topic configs in the request")
        if count > MAX_TOPICS_PER_BATCH:
            raise RequestError(f"{count} topic configs in one request: at most {MAX_TOPICS_PER_BATCH}")
        configs: list[TopicConfig] = []
        names: set[str] = set()
        for p in request.configs:
            config = self._normal_topic_config(p)
            if config.topic_name in names:
                raise RequestError(f"topic {config.topic_name} appears more than once in the request")
            names.add(config.topic_name)
            configs.append(config)
        olds = [self.topic_config_manager.select(c.topic_name) for c in configs]
        self.topic_config_manager.update_many(configs)
        for old, config in zip(olds, configs, strict=True):
            self._seed_added_queues(old, config)
        self.on_topics_changed()
        log.info("topics_updated count=%d first=%s last=%s", count, configs[0].topic_name, configs[-1].topic_name)
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def _seed_added_queues(self, old: TopicConfig | None, new: TopicConfig) -> None:
        """Queues added to a topic start, for every group that consumes it here, at their first message: a member
        taking one found no committed offset and started at its end (a group's default), skipping what producers
        had written to it meanwhile (upstream answers offset 0 for such a young queue)."""
        if old is None or new.read_queue_nums <= old.read_queue_nums:
            return
        added = range(old.read_queue_nums, new.read_queue_nums)
        topic = new.topic_name
        try:
            groups = self.consumer_offset_manager.seed_queues(topic, added,
                                                              lambda q: self.store.min_offset(topic, q))
        except Exception as exc:  # the topic is updated: its new queues start as any new group's would
            log.warning("consumer_offsets_not_seeded topic=%s queues=%d..%d error=%r", topic, added.start,
                        added.stop - 1, exc)
            return
        if groups:
            log.info("consumer_offsets_seeded topic=%s queues=%d..%d groups=%d first_group=%s", topic, added.start,
                     added.stop - 1, len(groups), groups[0])

    # -- static topics -----------------------------------------------------------------------------
    def update_mapping(self, request: broker_pb2.UpdateTopicQueueMappingRequest) -> common_pb2.CommandResponse:
        """Apply this broker's detail (checked), then its topic config: the mapping is the source of truth."""
        if not request.HasField("detail"):
            raise RequestError("no mapping detail in the request")
        detail = detail_from_proto(request.detail)
        checked_topic(detail.topic)
        if detail.topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
            raise RequestError(f"{AUTO_CREATE_TOPIC_KEY_TOPIC} is the auto-create default topic; it cannot be static")
        if not may_be_static(detail.topic):
            raise RequestError(f"topic {detail.topic} is a system topic (TBW102, the transaction topics, rmq_sys_*, "
                               "%RETRY%* and %DLQ%*); it cannot be static")
        config = topic_config_from_proto(request.config) if request.HasField("config") else None
        if config is not None:
            if config.topic_name != detail.topic:
                raise RequestError(f"topic config {config.topic_name} does not match mapping topic {detail.topic}")
            try:
                config.validate()
            except ValueError as exc:
                raise RequestError(str(exc)) from None
        existing = self.topic_config_manager.select(detail.topic)
        if existing is not None and self.mapping_manager.get(detail.topic) is None:
            raise RequestError(f"topic {detail.topic} is a normal topic on broker {self.config.broker_name}: "
                               "a static topic needs a name of its own")
        old = self.mapping_manager.get(detail.topic)
        # an older admin sends no expected epoch: its update is applied as before, unconditionally
        expected_epoch = request.expected_epoch if request.HasField("expected_epoch") else None
        try:
            self.mapping_manager.check_owner(detail)  # before anything is forgotten for it
            check_update(old, detail, expected_epoch)  # well-formed first: the reuse check reads the store by its ids
            reused = self._check_reused_queues(old, detail)
        except MappingError as exc:
            raise RequestError(str(exc)) from None
        # What the new links make stale goes first, durably, then the mapping: a refused write or a crash between
        # them leaves the old mapping, and the operator's retry does it all again (done after the mapping, a retry
        # saw no change and forgot nothing, and a restart brought the stale state back). Forgetting early is safe:
        # this state belongs to links this broker no longer leads.
        if reused:  # offsets of the expired links they held: never to be read as the new ones'
            forgotten = self.consumer_offset_manager.delete_queues(detail.topic, reused)
            log.info("static_queue_reused topic=%s queues=%s offsets_forgotten=%d", detail.topic, reused, forgotten)
        gained = sorted(set(detail.led_queues()) - set(old.led_queues() if old is not None else ()))
        if gained and detail.topic == KV_TOPIC and not self.config.kv_enable:
            # its shards here could neither be written nor read, and a chain through it reads no older link either
            raise RequestError(f"broker {self.config.broker_name} has kvEnable=false: it cannot lead shards "
                               f"{gained} of the KV store ({KV_TOPIC}); place them on brokers with kvEnable=true")
        if gained and old is not None:
            self.on_leadership_gained(detail.topic, gained)
        try:
            self.mapping_manager.update(detail, expected_epoch)  # checked again under the lock
        except MappingError as exc:
            raise RequestError(str(exc)) from None
        if config is not None:
            self.topic_config_manager.update(config)
        self.on_mapping_changed(detail.topic)
        self.on_topics_changed()
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def _check_reused_queues(self, old: TopicQueueMappingDetail | None, detail: TopicQueueMappingDetail) -> list[int]:
        """The physical queues a new leader item reuses (an expired one this broker used before). Each must start
        at the queue's max offset: below it, old messages would be read as the new item's; above it, a gap."""
        reused = []
        for global_id, items in detail.hosted_queues.items():
            leader = items[-1]
            if leader.bname != detail.bname or leader.start_offset == 0:
                continue
            held = old.leader(global_id) if old is not None else None
            if held is not None and (held.gen, held.queue_id) == (leader.gen, leader.queue_id):
                continue  # applied before: writes may have gone on since
            physical_max = self.local_store.max_offset(detail.topic, leader.queue_id)
            require(physical_max == leader.start_offset,
                    f"logic queue {global_id} of {detail.topic} reuses physical queue {leader.queue_id} from offset "
                    f"{leader.start_offset}, but that queue's max offset here is {physical_max}")
            reused.append(leader.queue_id)
        return reused

    def get_mapping(self, request: broker_pb2.TopicRequest) -> broker_pb2.TopicQueueMappingResponse:
        topic = checked_topic(request.topic)
        response = broker_pb2.TopicQueueMappingResponse(code=ResponseCode.SUCCESS)
        detail = self.mapping_manager.get(topic)
        if detail is not None:
            response.detail.CopyFrom(detail_to_proto(detail))
        config = self.topic_config_manager.select(topic)
        if config is not None:
            response.config.CopyFrom(topic_config_to_proto(config))
        return response

    def all_mappings(self) -> broker_pb2.TopicQueueMappingList:
        version = self.mapping_manager.data_version
        counter = version.counter  # first: a change made while the answer is built comes again next time
        return broker_pb2.TopicQueueMappingList(
            details=[detail_to_proto(d) for d in list(self.mapping_manager.mapping_table.values())],
            data_version=common_pb2.DataVersion(state_version=version.state_version, counter=counter))

    def metadata_versions(self) -> broker_pb2.MetadataVersions:
        return metadata_versions(self.topic_config_manager.data_version, self.mapping_manager.data_version,
                                 self.subscription_group_manager.data_version, self.acl_version())

    async def wait_metadata_change(self, request: broker_pb2.MetadataChangeRequest) -> broker_pb2.MetadataVersions:
        return await wait_metadata_change(request, self.metadata_versions)

    def delete_topic(self, request: broker_pb2.TopicRequest) -> common_pb2.CommandResponse:
        """The topic's consume queues and queue offsets, static mapping, consumer offsets and config (its commitlog
        records age out with the commitlog). Waits for the store's deletion record to be dispatched."""
        topic = checked_topic(request.topic)
        _refuse_system_topic(topic)  # e.g. rmq_sys_KV: its mapping is the KV store's shard table (every key)
        had_mapping = self.mapping_manager.get(topic) is not None
        if self.topic_config_manager.select(topic) is None and not had_mapping:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        # The config last: a refused write or a crash part-way leaves the topic listed, and the operator's retry
        # does every step again (each one deletes what is left). Deleted first, the retry was told the topic does
        # not exist, and its queues, offsets and mapping came back at a restart.
        not_deleted = self.local_store.delete_topic(topic)
        if not_deleted is not None:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"topic {topic} not deleted, its config kept (run deleteTopic "
                          f"again): {not_deleted}")
        self.mapping_manager.delete(topic)
        self._forget_consumption(topic)
        self.topic_config_manager.delete(topic, announce=had_mapping)
        self.on_topics_changed()
        # A send appended between the first deletion record and the config delete (its append checks the topic
        # under the commitlog's lock, as the deletion record appends: none lands after the second), and a pop or
        # commit meanwhile may have kept a group's place: drop them again (a topic created again would find them).
        self._forget_consumption(topic)
        not_deleted = self.local_store.delete_topic(topic)
        if not_deleted is not None:
            log.warning("topic_deleted_with_late_records topic=%s reason=%r action='a record stored during the "
                        "delete may stay in the topic's queue; deleteTopic again after creating it'", topic,
                        not_deleted)
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def _forget_consumption(self, topic: str) -> None:
        """Where the groups are in the topic: POP's state, the committed offsets, and its counts."""
        self.on_topic_deleted(topic)
        self.consumer_offset_manager.delete_topic(topic)
        self.stats.forget_topic(topic)

    def topic_config_changes(self, request: broker_pb2.TopicConfigChangesRequest) -> broker_pb2.TopicConfigChanges:
        """What changed since the caller's copy at ``request.since``; the whole table when that is not a version of
        this start of the broker (each start names its versions afresh) or is ahead of it."""
        manager = self.topic_config_manager
        version = manager.data_version
        counter = version.counter  # first: a change made while the answer is built comes again next time
        since = request.since
        whole = not request.HasField("since") or since.state_version != version.state_version or \
            since.counter > counter
        deleted: list[str] = []
        if whole:
            configs = manager.all_configs()
        else:
            configs, deleted = manager.changes_since(since.counter)
        return broker_pb2.TopicConfigChanges(
            configs=[topic_config_to_proto(c) for c in configs], deleted=deleted, whole=whole,
            data_version=common_pb2.DataVersion(state_version=version.state_version, counter=counter))

    def all_topic_configs(self) -> broker_pb2.TopicConfigList:
        manager = self.topic_config_manager
        version = manager.data_version
        return broker_pb2.TopicConfigList(
            configs=[topic_config_to_proto(c) for c in manager.all_configs()],
            data_version=common_pb2.DataVersion(state_version=version.state_version, counter=version.counter))

    def topic_stats(self, request: broker_pb2.TopicRequest) -> broker_pb2.TopicStats:
        topic = checked_topic(request.topic)
        config = self.topic_config_manager.select(topic)
        if config is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        store = self.store
        queues = []
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            max_offset = store.max_offset(topic, queue_id)
            queues.append(broker_pb2.TopicQueueStats(
                queue_id=queue_id, min_offset=store.min_offset(topic, queue_id), max_offset=max_offset,
                last_update_timestamp=store.last_store_timestamp(topic, queue_id)))
        return broker_pb2.TopicStats(code=ResponseCode.SUCCESS, queues=queues)

    # -- groups ------------------------------------------------------------------------------------
    def update_group(self, request: broker_pb2.SubscriptionGroupConfig) -> common_pb2.CommandResponse:
        group = checked_group(request.group_name)
        self.subscription_group_manager.update(SubscriptionGroupConfig(
            group, request.consume_enable, request.consume_broadcast_enable, request.retry_queue_nums,
            request.retry_max_times, request.broker_id, request.consume_message_orderly))
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def delete_group(self, request: broker_pb2.GroupRequest) -> common_pb2.CommandResponse:
        # Names of up to 127 chars: groups made before consumer groups were held to 120 can still be deleted.
        group = checked_group(request.group_name, "existing consumer")
        if not self.subscription_group_manager.delete(group):
            raise Refusal(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist")
        self.stats.forget_group(group)
        self.on_group_deleted(group)
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    def all_consumer_offsets(self) -> broker_pb2.ConsumerOffsetList:
        return broker_pb2.ConsumerOffsetList(offsets=[
            broker_pb2.ConsumerOffsetEntry(group=g, topic=t, queue_id=q, offset=o)
            for g, t, q, o in self.consumer_offset_manager.all_offsets()])

    def all_groups(self) -> broker_pb2.SubscriptionGroupList:
        version = version_proto(self.subscription_group_manager.data_version)  # first: a later change reads as newer
        groups = self.subscription_group_manager.subscription_group_table.values()
        return broker_pb2.SubscriptionGroupList(groups=[
            broker_pb2.SubscriptionGroupConfig(**dataclasses.asdict(g)) for g in list(groups)], data_version=version)

    def consume_stats(self, request: broker_pb2.ConsumeStatsRequest) -> broker_pb2.ConsumeStats:
        group = checked_group(request.consumer_group)
        offsets = self.consumer_offset_manager
        topics = [checked_topic(request.topic)] if request.topic else offsets.topics_of_group(group)
        queues = []
        for topic in topics:
            config = self.topic_config_manager.select(topic)
            if config is None:
                continue
            for queue_id in range(config.read_queue_nums):
                consumer_offset = offsets.query_offset(group, topic, queue_id)
                # As upstream: the store time of the last message consumed (the one below the offset), read from
                # the store, so it is the same after a restart and on a slave.
                queues.append(broker_pb2.QueueConsumeStats(
                    topic=topic, queue_id=queue_id, broker_offset=self.store.max_offset(topic, queue_id),
                    consumer_offset=consumer_offset,
                    last_timestamp=self.store.store_timestamp_of(topic, queue_id, consumer_offset - 1)))
        if not queues:
            raise Refusal(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} has no offsets" + (
                f" on topic {request.topic}" if request.topic else ""))
        return broker_pb2.ConsumeStats(code=ResponseCode.SUCCESS, queues=queues)

    # -- runtime -----------------------------------------------------------------------------------
    def runtime_info(self) -> broker_pb2.BrokerRuntimeInfo:
        c = self.config
        store = self.local_store  # its commitlog and dispatch progress
        table = {
            "brokerName": c.broker_name,
            "brokerVersionDesc": _version(),
            "brokerId": str(c.broker_id),
            "brokerAddr": self.broker_addr,
            "clusterName": c.broker_cluster_name,
            "storeType": c.store_type.value,
            "flushDiskType": c.flush_disk_type.value,
            "commitLogMinOffset": str(store.commit_log.min_offset()),
            "commitLogMaxOffset": str(store.commit_log.max_offset()),
            "commitLogConfirmOffset": str(store.commit_log.confirm_offset),
            "dispatchBehindBytes": str(store.commit_log.confirm_offset - store.reput.reput_from_offset),
            "topicCount": str(len(self.topic_config_manager.topic_config_table)),
            "bootTimestamp": str(self.boot_timestamp),
            "uptimeMs": str(int((time.monotonic() - self._booted_at) * 1000)),
            "pid": str(os.getpid()),
            "putTps": f"{self.stats.put_tps():.1f}",
            "getTps": f"{self.stats.get_tps():.1f}",
            "kvEnable": str(c.kv_enable).lower(),
            "storeWriteable": str(store.running_flags.writeable).lower(),
            "storeRefusal": store.running_flags.write_refusal() or "",
            "commitLogDiskRatio": _disk_ratio(store),
            **self.timer_info(),
            **self.ha_info(),
        }
        return broker_pb2.BrokerRuntimeInfo(table=table)

    # -- broker config (mqadmin getBrokerConfig / updateBrokerConfig) ---------------------------------
    def broker_config(self) -> broker_pb2.BrokerConfigTable:
        table = {key: _shown(key, getattr(self.config, attr)) for key, (attr, _parse) in KEYS.items()}
        return broker_pb2.BrokerConfigTable(table=table, live_keys=sorted(LIVE_CONFIG_KEYS))

    def update_broker_config(self, request: broker_pb2.UpdateBrokerConfigRequest) -> common_pb2.CommandResponse:
        """Change a live key until restart; any other key is refused naming it."""
        key = request.key.strip()
        spec = KEYS.get(key)
        require(spec is not None, f"unknown broker config key {key!r}")
        assert spec is not None
        require(key in LIVE_CONFIG_KEYS, f"{key} cannot change while the broker runs: set it in broker.conf and "
                                         f"restart (live keys: {', '.join(sorted(LIVE_CONFIG_KEYS))})")
        attr, parse = spec
        try:
            value = parse(request.value.strip())
        except ValueError as exc:
            raise RequestError(f"{key}: {exc}") from None
        old = getattr(self.config, attr)
        setattr(self.config, attr, value)
        send = self.send_processor()
        if send is not None and key in ("autoCreateTopicEnable", "defaultTopicQueueNums"):
            c = self.config
            send.limits = dataclasses.replace(send.limits, auto_create_topic_enable=c.auto_create_topic_enable,
                                              default_topic_queue_nums=c.default_topic_queue_nums)
        if key == "autoCreateTopicEnable" and value != old:
            self.ensure_default_topic()
            self.on_topics_changed()
        log.info("broker_config_updated key=%s old=%s new=%s", key, _config_text(old), _config_text(value))
        return common_pb2.CommandResponse(code=ResponseCode.SUCCESS)

    # -- producers and stats (mqadmin producerConnection / statsAll) ----------------------------------------
    def producer_connections(self, request: broker_pb2.GroupRequest) -> broker_pb2.ProducerConnectionList:
        group = checked_group(request.group_name, "producer")
        sessions = self.producers.sessions_of(group) if self.producers is not None else []
        return broker_pb2.ProducerConnectionList(code=ResponseCode.SUCCESS, connections=[
            broker_pb2.ProducerConnection(client_id=client_id, addr=addr, last_heartbeat_age_ms=age)
            for client_id, addr, age in sessions])

    def broker_stats(self) -> broker_pb2.BrokerStatsTable:
        """Every topic's row and each of its groups' (those with offsets, or that consumed it since boot). Built
        off the event loop (the servicer runs it on a thread), each source read once: linear in topics and groups."""
        rates = self.stats.key_rates()
        totals = self.stats.totals_by_topic()
        offsets = self.consumer_offset_manager
        rows = []
        groups_of: dict[str, set[str]] = {}
        for g, t, _q, _o in offsets.all_offsets():
            groups_of.setdefault(t, set()).add(g)
        for config in self.topic_config_manager.all_configs():
            topic = config.topic_name
            queues = range(max(config.read_queue_nums, config.write_queue_nums))
            max_offsets = {q: self.store.max_offset(topic, q) for q in queues}
            counted = totals.get(topic, {})
            rows.append(broker_pb2.TopicStatsRow(topic=topic, total=sum(max_offsets.values()),
                                                 tps=rates.get((topic, ""), 0.0), count_since_boot=counted.get("", 0)))
            for group in sorted(groups_of.get(topic, set()) | {g for g in counted if g}):
                committed = {q: max(offsets.query_offset(group, topic, q), 0) for q in queues}
                rows.append(broker_pb2.TopicStatsRow(
                    topic=topic, group=group, total=sum(committed.values()),
                    lag=sum(max(max_offsets[q] - committed[q], 0) for q in queues),
                    tps=rates.get((topic, group), 0.0), count_since_boot=counted.get(group, 0)))
        return broker_pb2.BrokerStatsTable(rows=rows)


# Keys updateBrokerConfig changes at once (each is read where it is used, or carried there above).
LIVE_CONFIG_KEYS = frozenset({"autoCreateTopicEnable", "defaultTopicQueueNums", "flushConsumerOffsetInterval"})


def _refuse_system_topic(topic: str) -> None:
    """The broker's own topics change only through the broker (it makes them at start, as it needs them)."""
    refusal = system_topic_refusal(topic)
    require(refusal is None, refusal or "")


def _version() -> str:
    try:
        return "pyrocketmq " + importlib.metadata.version("pyrocketmq")
    except importlib.metadata.PackageNotFoundError:
        return "pyrocketmq (not installed)"


def _shown(key: str, value: object) -> str:
    """A key's value as getBrokerConfig shows it: secrets (a secret key, a password, credentials) never leave."""
    secret = any(word in key.lower() for word in ("secret", "password", "credential",
                                                        "authenticationuser"))
    return "******" if secret and value else _config_text(value)


def _config_text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _disk_ratio(store: MessageStore) -> str:
    """Upstream's ``commitLogDiskRatio``: how full the store's (fullest) disk was at the last measurement."""
    usage = store.disk_watcher.latest
    return f"{usage.used_percent / 100:.4f}" if usage is not None else ""
