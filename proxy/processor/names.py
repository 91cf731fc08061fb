"""Checks of the names and expressions in v2 requests, answered with the v2 code that names what is wrong."""

import re
import unicodedata

from common.subscription import parse_sub_expression
from common.topic_validator import InvalidTopicError, validate_topic
from proto.v2 import definition_pb2
from proxy.v2_codes import Code, ProxyError

GROUP_MAX_LENGTH = 255
_VALID_GROUP = re.compile(r"[%a-zA-Z0-9_-]+")


def check_topic(topic: str) -> str:
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:
        raise ProxyError(Code.ILLEGAL_TOPIC, str(exc)) from None
    return topic


def check_group(group: str) -> str:
    if not group or len(group) > GROUP_MAX_LENGTH or not _VALID_GROUP.fullmatch(group):
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {group[:40]!r} is empty, longer than "
                                                      f"{GROUP_MAX_LENGTH} chars or has characters outside "
                                                      "[%a-zA-Z0-9_-]")
    return group


def tag_expression(expression: definition_pb2.FilterExpression) -> str:
    """The tag expression the brokers filter by ("*" when none was given); SQL92 is not served."""
    if expression.type == definition_pb2.SQL:
        raise ProxyError(Code.UNSUPPORTED, "SQL92 filter expressions are not supported: filter by tag")
    text = expression.expression.strip() or "*"
    try:
        tags = parse_sub_expression(text)
    except ValueError as exc:
        raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
    for tag in tags or ():
        # No message carries such a tag (sends refuse '|'): POP would skip the group's whole backlog as unmatched.
        if "|" in tag or _has_control_character(tag):
            raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"tag {tag[:40]!r} of filter expression has '|' or a "
                                                             "control character (tags are separated by '||')")
    return text


def _has_control_character(text: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in text)
