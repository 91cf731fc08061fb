"""TopicConfig to and from its protobuf form (broker admin, registration, admin SDK)."""

from common.topic_config import TopicConfig
from proto import common_pb2


def topic_config_from_proto(p: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(p.topic_name, p.read_queue_nums, p.write_queue_nums, p.perm, p.topic_sys_flag, p.order,
                       dict(p.attributes))


def topic_config_to_proto(c: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(topic_name=c.topic_name, read_queue_nums=c.read_queue_nums,
                                  write_queue_nums=c.write_queue_nums, perm=c.perm, topic_sys_flag=c.topic_sys_flag,
                                  order=c.order, attributes=c.attributes)
