"""Tag filtering on the broker: a subscription expression to the set of tag hashes (None = everything).
The hash can collide; clients repeat the exact check."""

from functools import lru_cache

from common.message_properties import tags_code
from common.request_error import RequestError
from common.subscription import parse_sub_expression


@lru_cache(maxsize=4096)
def tags_codes_of(sub_expression: str) -> frozenset[int] | None:
    try:
        tags = parse_sub_expression(sub_expression)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return None if tags is None else frozenset(tags_code(t) for t in tags)
