"""Topic name rules shared by the store, the broker and the SDK."""

import re

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
