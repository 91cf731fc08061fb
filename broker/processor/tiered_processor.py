"""Tiered storage requests: status per queue (and, for the Spark jobs, metadata snapshots and commits)."""

import time
from pathlib import Path

from broker.metadata.topic_config_manager import TopicConfigManager
from broker.processor.request_checks import checked_topic
from broker.tiered.metadata.tiered_metadata_store import FileSegmentMetadata, SegmentStatus
from broker.tiered.provider.file_segment import FileSegmentType
from broker.tiered.replica.tier_role import TierRole
from broker.tiered.tiered_store import TieredStore
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from proto import tiered_pb2


def segment_to_proto(m: FileSegmentMetadata) -> tiered_pb2.TieredSegment:
    return tiered_pb2.TieredSegment(path=m.path, type=int(m.type), topic=m.topic, queue_id=m.queue_id,
                                    base_offset=m.base_offset, size=m.size, status=int(m.status),
                                    create_ms=m.create_ms, begin_ms=m.begin_ms, end_ms=m.end_ms, seal_ms=m.seal_ms)


def segment_from_proto(p: tiered_pb2.TieredSegment) -> FileSegmentMetadata:
    try:
        file_type, status = FileSegmentType(p.type), SegmentStatus(p.status)
    except ValueError as exc:
        raise RequestError(f"segment {p.path}: {exc}") from None
    require(bool(p.path) and p.size >= 0 and p.base_offset >= 0, f"segment {p.path!r}: empty path or negative size")
    return FileSegmentMetadata(p.path, file_type, p.topic, p.queue_id, p.base_offset, p.size, status, p.create_ms,
                               p.begin_ms, p.end_ms, p.seal_ms)


class TieredProcessor:
    def __init__(self, broker_name: str, tiered: TieredStore | None, topic_config_manager: TopicConfigManager) -> None:
        self.broker_name = broker_name
        self._tiered = tiered  # None: tieredStoreEnable=false
        self.topic_config_manager = topic_config_manager

    def _on(self) -> TieredStore:
        """The tiered store; a refusal when it is off."""
        if self._tiered is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE,
                          f"tiered storage is off on broker {self.broker_name} (tieredStoreEnable=false)")
        return self._tiered

    def _changeable(self) -> TieredStore:
        """The tiered store, if this broker may change its tier (the Spark jobs' commits): not a replica that
        follows its master's tier, or does not know yet whether it will (``broker/tiered/replica/tier_role.py``),
        whose records the next copy from its master replaces, while the job deletes objects the master still reads."""
        tiered = self._on()
        if tiered.role in (TierRole.WAITING, TierRole.SHARED):
            raise Refusal(ResponseCode.NO_PERMISSION, f"this broker is a replica of {self.broker_name} that follows "
                          f"its master's tier (tieredRole={tiered.role.value}): run the job against the master")
        return tiered

    # -- for the Spark jobs ------------------------------------------------------------------------------
    def metadata(self, request: tiered_pb2.TieredMetadataRequest) -> tiered_pb2.TieredMetadataResponse:
        tiered = self._on()
        topic = checked_topic(request.topic) if request.topic else None
        return tiered_pb2.TieredMetadataResponse(
            code=ResponseCode.SUCCESS, broker_name=self.broker_name,
            backend_provider=tiered.factory.provider.value,
            backend_root=str(tiered.backend_root.resolve()) if isinstance(tiered.backend_root, Path)
            else tiered.backend_root,
            s3_endpoint=tiered.s3.endpoint if tiered.s3 else "", s3_bucket=tiered.s3.bucket if tiered.s3 else "",
            s3_region=tiered.s3.region if tiered.s3 else "",
            segments=[segment_to_proto(m) for m in tiered.segments(topic)], snapshot_ms=int(time.time() * 1000))

    def tier_copy(self, request: tiered_pb2.TierCopyRequest) -> tiered_pb2.TierCopyResponse:
        """For a controller-mode replica (``broker/tiered/replica/tier_role.py``)."""
        master = self._on().copy_for_replica(request.known_version)
        copy = master.copy
        return tiered_pb2.TierCopyResponse(code=ResponseCode.SUCCESS, tier_id=master.tier_id,
                                           checkpoint=copy.checkpoint, uploaded_end=copy.uploaded_end,
                                           records=copy.records, version=copy.version, whole=copy.whole)

    def replace_segments(self, request: tiered_pb2.ReplaceSegmentsRequest) -> tiered_pb2.ReplaceSegmentsResponse:
        tiered = self._changeable()
        old = [segment_from_proto(p) for p in request.old]
        require(len(old) >= 2, "a replacement needs at least two old segments")
        merged = segment_from_proto(request.merged)
        require(all((m.topic, m.queue_id, m.type) == (merged.topic, merged.queue_id, merged.type) for m in old),
                "old and merged segments must be of one queue and type")
        if not tiered.replace_segments(old, merged):
            raise Refusal(ResponseCode.SYSTEM_BUSY, "the segments changed since the snapshot (or are not "
                                                    "consecutive sealed ones): nothing replaced")
        return tiered_pb2.ReplaceSegmentsResponse(code=ResponseCode.SUCCESS)

    def mark_expired(self, request: tiered_pb2.MarkExpiredRequest) -> tiered_pb2.SegmentsResponse:
        tiered = self._changeable()
        expired = tiered.mark_expired(request.now_ms or None)
        return tiered_pb2.SegmentsResponse(code=ResponseCode.SUCCESS, segments=map(segment_to_proto, expired))

    def drop_segments(self, request: tiered_pb2.DropSegmentsRequest) -> tiered_pb2.DropSegmentsResponse:
        tiered = self._changeable()
        dropped = tiered.drop_segments([segment_from_proto(p) for p in request.segments])
        return tiered_pb2.DropSegmentsResponse(code=ResponseCode.SUCCESS, dropped=dropped)

    def status(self, request: tiered_pb2.TieredStatusRequest) -> tiered_pb2.TieredStatusResponse:
        topic = checked_topic(request.topic)
        name = self.broker_name
        tiered = self._on()
        config = self.topic_config_manager.select(topic)
        flat_files = tiered.flat_files
        queue_ids = set(range(config.read_queue_nums)) if config else set()
        queue_ids |= {f.queue_id for f in flat_files.queues_of(topic)}
        if not queue_ids:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on broker {name}")
        local = tiered.store.local
        queues = []
        for queue_id in sorted(queue_ids):
            flat = flat_files.get(topic, queue_id)
            local_max = local.max_offset(topic, queue_id)
            status = tiered_pb2.TieredQueueStatus(
                queue_id=queue_id, local_min_offset=local.min_offset(topic, queue_id), local_max_offset=local_max,
                tiered_min_offset=-1, tiered_max_offset=-1, upload_lag=local_max)
            if flat is not None:
                status.tiered_min_offset, status.tiered_max_offset = flat.min_offset, flat.max_offset
                status.commit_log_segments = len(flat.commit_log.segments)
                status.consume_queue_segments = len(flat.consume_queue.segments)
                status.tiered_bytes = flat.total_bytes()
                status.upload_lag = max(0, local_max - flat.max_offset)
            queues.append(status)
        return tiered_pb2.TieredStatusResponse(code=ResponseCode.SUCCESS, broker_name=name,
                                               storage_level=tiered.store.level.value, queues=queues)
