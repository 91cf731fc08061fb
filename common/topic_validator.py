"""Topic name rules shared by the store, the broker and the SDK."""

import re

from common.kv_shard import KV_TOPIC
from common.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC
from common.transaction_topic import SYSTEM_TOPICS as TRANSACTION_TOPICS

TOPIC_MAX_LENGTH = 127
_VALID_TOPIC = re.compile(r"[%a-zA-Z0-9_-]+")


class InvalidTopicError(ValueError):
    """The topic name breaks a naming rule; the message says which."""


def validate_topic(topic: str) -> None:
    if not topic:
        raise InvalidTopicError("topic is empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidTopicError(f"topic is {len(topic)} chars, longer than {TOPIC_MAX_LENGTH}: {topic[:40]}...")
    if not _VALID_TOPIC.fullmatch(topic):
        raise InvalidTopicError(f"topic {topic!r} has characters outside [%a-zA-Z0-9_-]")


# Topics the broker owns (as upstream's TopicValidator): the auto-create default route, retry and dead-letter
# topics of consumer groups, and rmq_sys_* system topics (the KV store's operations, ...). Users do not send to
# them as ordinary topics. Transactions' topics (RMQ_SYS_TRANS_HALF_TOPIC, ...) keep upstream's names.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def conflicts_with_system_topic(topic: str) -> bool:
    """A topic only the broker creates, changes and deletes (upstream's TopicValidator.isSystemTopic, which its
    updateTopic and deleteTopic refuse). A group's retry and dead-letter topics are not: operators change their
    queues and permission, or delete them, as upstream lets them."""
    return topic == AUTO_CREATE_TOPIC_KEY_TOPIC or topic in TRANSACTION_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def system_topic_refusal(topic: str) -> str | None:
    """Why updateTopic and deleteTopic refuse ``topic`` (None: they do not): the broker and the SDK say the same."""
    if not conflicts_with_system_topic(topic):
        return None
    return (f"topic {topic} is conflict with system topic: TBW102, the transaction topics and rmq_sys_* topics "
            "belong to the broker; updateTopic and deleteTopic do not change them")


def is_system_topic(topic: str) -> bool:
    return conflicts_with_system_topic(topic) or topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def may_be_static(topic: str) -> bool:
    """No system topic may be static (a group's %RETRY% topic made static lost its retries silently) but the KV
    store's, whose shards are a static topic's logic queues."""
    return topic == KV_TOPIC or not is_system_topic(topic)


# A consumer group's retry and dead-letter topics are its name behind a prefix (``common/group_topics.py``): a group
# name leaves room for the longer one, %RETRY%, within the topic limit (127 - 7 = 120 chars).
GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - max(len(RETRY_GROUP_TOPIC_PREFIX), len(DLQ_GROUP_TOPIC_PREFIX))


class InvalidGroupError(InvalidTopicError):
    """The consumer group name breaks a naming rule; the message says which."""


def validate_group(group: str) -> None:
    """A consumer group name: the topics' characters, and short enough for its %RETRY% and %DLQ% topics."""
    if not group:
        raise InvalidGroupError("group is empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroupError(f"group is {len(group)} chars, longer than {GROUP_MAX_LENGTH}: {group[:40]}... (its "
                                f"retry topic {RETRY_GROUP_TOPIC_PREFIX}<group> must fit the {TOPIC_MAX_LENGTH}-char "
                                "topic limit)")
    if not _VALID_TOPIC.fullmatch(group):
        raise InvalidGroupError(f"group {group!r} has characters outside [%a-zA-Z0-9_-]")


def validate_user_send_topic(topic: str) -> None:
    """A topic an ordinary send may name: valid, and not one the broker owns."""
    validate_topic(topic)
    if is_system_topic(topic):
        raise InvalidTopicError(f"topic {topic} belongs to the broker (TBW102, %RETRY%*, %DLQ%* and rmq_sys_* are "
                                "system topics): send to a topic of your own")
