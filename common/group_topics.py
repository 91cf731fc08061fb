"""A consumer group's own topics: where its failed messages wait for a retry, and where they end (upstream's
names, so tools that know RocketMQ find them)."""

from common.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
