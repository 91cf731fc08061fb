"""Tiered storage requests: status per queue (and, for the Spark jobs, metadata snapshots and commits)."""

from typing import TYPE_CHECKING

from broker.processor.request_checks import checked_topic
from common.response_code import ResponseCode
from proto import tiered_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController


class TieredProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.c = controller

    def status(self, request: tiered_pb2.TieredStatusRequest) -> tiered_pb2.TieredStatusResponse:
        c = self.c
        topic = checked_topic(request.topic)
        name = c.config.broker_name
        if c.tiered is None:
            return tiered_pb2.TieredStatusResponse(code=ResponseCode.SERVICE_NOT_AVAILABLE, broker_name=name,
                                                   remark=f"tiered storage is off on broker {name} "
                                                          "(tieredStoreEnable=false)")
        config = c.topic_config_manager.select(topic)
        flat_files = c.tiered.flat_files
        queue_ids = set(range(config.read_queue_nums)) if config else set()
        queue_ids |= {f.queue_id for f in flat_files.queues_of(topic)}
        if not queue_ids:
            return tiered_pb2.TieredStatusResponse(code=ResponseCode.TOPIC_NOT_EXIST, broker_name=name,
                                                   remark=f"topic {topic} does not exist on broker {name}")
        local = c.tiered.store.local
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
                                               storage_level=c.tiered.store.level, queues=queues)
