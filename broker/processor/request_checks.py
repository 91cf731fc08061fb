"""Checks shared by processors: topic names, queue ids, and the topic's config."""

from collections.abc import Callable

from broker.metadata.topic_config_manager import TopicConfigManager
from common.message_id import encode_host
from common.request_error import RequestError, require
from common.topic_config import TopicConfig
from common.topic_validator import (
    InvalidGroupError,
    InvalidTopicError,
    validate_group,
    validate_topic,
    validate_user_send_topic,
)


def checked_topic(topic: str, validate: Callable[[str], None] = validate_topic) -> str:
    try:
        validate(topic)
    except InvalidTopicError as exc:
        raise RequestError(str(exc)) from None
    return topic


def checked_send_topic(topic: str) -> str:
    """A topic an ordinary send may name: valid, and not one the broker owns (TBW102, %RETRY%, %DLQ%, rmq_sys_)."""
    return checked_topic(topic, validate_user_send_topic)


def checked_group(group: str, kind: str = "consumer") -> str:
    """``kind``: the group's kind, which an empty group's refusal names. A "consumer" group is at most 120 chars
    (its %RETRY% topic must be a valid topic); a producer group has no topics, and an "existing consumer" group may
    predate that rule: 127."""
    require(bool(group), f"{kind} group is empty")
    try:
        if kind == "consumer":
            validate_group(group)
        else:
            validate_topic(group)  # same character rules as topics
    except InvalidGroupError as exc:
        raise RequestError(str(exc)) from None
    except InvalidTopicError as exc:
        raise RequestError(str(exc).replace("topic", "group")) from None
    return group


def checked_born_host(born_host: str) -> str:
    """An ``ip:port`` a record can carry (IPv4, port 0..65535)."""
    _, _, port = born_host.rpartition(":")
    bad = f"born host {born_host[:64]!r} is not IPv4 'ip:port'"
    require(port.isascii() and port.isdigit() and int(port) <= 65535, bad)
    try:
        encode_host(born_host)
    except ValueError:
        raise RequestError(bad) from None
    return born_host


def checked_queue_id(config: TopicConfig, queue_id: int, writing: bool) -> int:
    count = config.write_queue_nums if writing else config.read_queue_nums
    require(0 <= queue_id < count,
            f"queue id {queue_id} does not exist: topic {config.topic_name} has queues 0..{count - 1}")
    return queue_id


def topic_config(manager: TopicConfigManager, topic: str) -> TopicConfig | None:
    return manager.select(checked_topic(topic))
