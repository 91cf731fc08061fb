"""How each metadata table is keyed and encoded: compact binary for RocksDB, today's JSON documents for files.

A :class:`MetadataTable` describes one table (topics, subscription groups, consumer offsets) to both backends:
its key prefix and binary key/value codecs for RocksDB, and its JSON file name and document form for the
JSON backend (and for importing JSON files into RocksDB).

RocksDB keys (all tables share one database, told apart by a two-byte prefix)::

    t:<topic>                                  -> topic config        "<BiiiiB" (+ JSON attributes if any)
    g:<group>                                  -> subscription group  "<B??iiq"
    o:<topic>\\0<group>\\0<queue id, >i>         -> committed offset    "<q"
    u:<username>                               -> ACL user              JSON {"username","password","userType"}
    a:<subject>                                -> ACL policy            JSON {"subject","entries":[...]}
    m:<name>                                   -> backend bookkeeping (format version, import marker)

Offsets are keyed topic first so that a topic's offsets are one contiguous range (``delete_range``).
Names never contain a NUL byte (topic and group names are ``[%a-zA-Z0-9_-]``).
"""

import dataclasses
import json
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from broker.metadata.subscription_group_config import SubscriptionGroupConfig
from common.acl import (
    AclEntry,
    Policy,
    User,
    normalize_actions,
    normalize_decision,
    normalize_resource,
    normalize_user_type,
)
from common.topic_config import TopicConfig

K = TypeVar("K")
V = TypeVar("V")

FORMAT_VERSION = 1


class FrozenEmptyAttributes(dict):
    """The one empty attribute map shared by every topic that has none: a million empty dicts cost ~80 MB.
    Mutating it raises instead of silently changing every topic."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("shared empty topic attributes are read-only: assign a new dict instead")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse  # type: ignore

    def __repr__(self) -> str:
        return "{}"

    def __copy__(self) -> dict[str, str]:  # a copy is the caller's to change
        return {}

    def __deepcopy__(self, memo: dict) -> dict[str, str]:
        return {}


EMPTY_ATTRIBUTES: dict[str, str] = FrozenEmptyAttributes()


def compact_attributes(config: TopicConfig) -> TopicConfig:
    """``config`` with an empty attribute map replaced by the shared one (same object, changed in place)."""
    if not config.attributes and config.attributes is not EMPTY_ATTRIBUTES:
        config.attributes = EMPTY_ATTRIBUTES
    return config


# -- topics ----------------------------------------------------------------------------------------------------
_TOPIC = struct.Struct("<BiiiiB")  # version, read queues, write queues, perm, sys flag, order


def encode_topic(c: TopicConfig) -> bytes:
    head = _TOPIC.pack(FORMAT_VERSION, c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_sys_flag, c.order)
    if c.attributes:
        return head + json.dumps(c.attributes, separators=(",", ":"), sort_keys=True).encode()
    return head


def decode_topics(items: Iterable[tuple[bytes, bytes]]) -> Iterator[TopicConfig]:
    """Bulk decode of ``(name, value)`` pairs; equal values (most topics share a shape) are unpacked once."""
    shapes: dict[bytes, tuple] = {}
    unpack, head_size, empty = _TOPIC.unpack_from, _TOPIC.size, EMPTY_ATTRIBUTES
    for key, value in items:
        name = key.decode()
        if len(value) == head_size:
            f = shapes.get(value)
            if f is None:
                f = shapes[value] = unpack(value)
                _check_version(f[0], "topic", name)
            yield TopicConfig(name, f[1], f[2], f[3], f[4], bool(f[5]), empty)
        else:
            f = unpack(value)
            _check_version(f[0], "topic", name)
            yield TopicConfig(name, f[1], f[2], f[3], f[4], bool(f[5]), json.loads(value[head_size:]))


def topics_from_json(doc: Any) -> Iterator[TopicConfig]:
    for raw in (doc or {}).get("topics", []):
        yield compact_attributes(TopicConfig(**raw))


def topics_to_json(configs: Iterable[TopicConfig]) -> Any:
    return {"topics": [dataclasses.asdict(c) for c in configs]}


# -- subscription groups ---------------------------------------------------------------------------------------
_GROUP = struct.Struct("<B??iiq")  # version, consume enable, broadcast enable, retry queues, retry max, broker id
_GROUP_ORDERLY = struct.Struct("<?")  # consume message orderly: after _GROUP (records written before it lack it)


def encode_group(g: SubscriptionGroupConfig) -> bytes:
    return _GROUP.pack(FORMAT_VERSION, g.consume_enable, g.consume_broadcast_enable, g.retry_queue_nums,
                       g.retry_max_times, g.broker_id) + _GROUP_ORDERLY.pack(g.consume_message_orderly)


def decode_groups(items: Iterable[tuple[bytes, bytes]]) -> Iterator[SubscriptionGroupConfig]:
    for key, value in items:
        f = _GROUP.unpack_from(value)
        name = key.decode()
        _check_version(f[0], "group", name)
        orderly = len(value) > _GROUP.size and _GROUP_ORDERLY.unpack_from(value, _GROUP.size)[0]
        yield SubscriptionGroupConfig(name, f[1], f[2], f[3], f[4], f[5], consume_message_orderly=bool(orderly))


def groups_from_json(doc: Any) -> Iterator[SubscriptionGroupConfig]:
    for raw in (doc or {}).get("groups", []):
        yield SubscriptionGroupConfig(**raw)


def groups_to_json(groups: Iterable[SubscriptionGroupConfig]) -> Any:
    return {"groups": [dataclasses.asdict(g) for g in groups]}


# -- consumer offsets ------------------------------------------------------------------------------------------
# A record is (group, topic, queue id, offset); its key is (topic, group, queue id): a topic's offsets are one
# key range. A key prefix (topic,) names all of a topic's offsets.
OffsetRecord = tuple[str, str, int, int]
OffsetKey = tuple  # (topic,) | (topic, group) | (topic, group, queue_id)
_QUEUE = struct.Struct(">i")
_OFFSET = struct.Struct("<q")


def offset_key(record: OffsetRecord) -> OffsetKey:
    group, topic, queue_id, _ = record
    return topic, group, queue_id


def encode_offset_key(key: OffsetKey) -> bytes:
    """A whole key, or a prefix of one: (topic,) and (topic, group) end in the NUL that follows the name."""
    out = key[0].encode() + b"\0"
    if len(key) > 1:
        out += key[1].encode() + b"\0"
    if len(key) > 2:
        out += _QUEUE.pack(key[2])
    return out


def encode_offset(record: OffsetRecord) -> bytes:
    return _OFFSET.pack(record[3])


def decode_offsets(items: Iterable[tuple[bytes, bytes]]) -> Iterator[OffsetRecord]:
    unpack_queue, unpack_offset = _QUEUE.unpack_from, _OFFSET.unpack_from
    for key, value in items:
        topic, group, _ = key.split(b"\0", 2)
        yield group.decode(), topic.decode(), unpack_queue(key, len(key) - 4)[0], unpack_offset(value)[0]


def offsets_from_json(doc: Any) -> Iterator[OffsetRecord]:
    for key, queues in (doc or {}).get("offsetTable", {}).items():
        topic, _, group = key.partition("@")
        for queue_id, offset in queues.items():
            yield group, topic, int(queue_id), int(offset)


def offsets_to_json(records: Iterable[OffsetRecord]) -> Any:
    table: dict[str, dict[str, int]] = {}
    for group, topic, queue_id, offset in records:
        table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = offset
    return {"offsetTable": table}


# -- ACL users and policies (few, small: JSON values in both backends) -----------------------------------------
def user_to_doc(u: User) -> dict[str, str]:
    return {"username": u.username, "password": u.password, "userType": u.user_type}


def user_from_doc(doc: dict[str, Any]) -> User:
    """A stored user, its type spelled as the checks compare it (a hand-edited file may say "super")."""
    return User(_text(doc, "username"), _text(doc, "password"), normalize_user_type(doc.get("userType", "Normal")))


def policy_to_doc(p: Policy) -> dict[str, Any]:
    return {"subject": p.subject, "entries": [{"resource": e.resource, "actions": list(e.actions),
                                                "decision": e.decision} for e in p.entries]}


def policy_from_doc(doc: dict[str, Any]) -> Policy:
    """A stored policy, every value spelled as the checks compare them: a hand-edited "deny" counted as Allow (any
    decision but Deny did) and a "pub" matched nothing. A value no spelling makes valid raises ValueError."""
    return Policy(_text(doc, "subject"), tuple(
        AclEntry(normalize_resource(_text(e, "resource")), normalize_actions(_texts(e, "actions")),
                 normalize_decision(e.get("decision", "Allow"))) for e in doc.get("entries", [])))


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} {value!r} is not a string")
    return value


def _texts(doc: dict[str, Any], key: str) -> list[str]:
    value = doc[key]
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} {value!r} is not a list of strings")
    return value


def _json_value(to_doc: Callable[[Any], Any]) -> Callable[[Any], bytes]:
    return lambda v: json.dumps(to_doc(v), separators=(",", ":"), sort_keys=True).encode()


def _json_decode(from_doc: Callable[[Any], V]) -> Callable[[Iterable[tuple[bytes, bytes]]], Iterator[V]]:
    def decode(items: Iterable[tuple[bytes, bytes]]) -> Iterator[V]:
        for _, value in items:
            yield from_doc(json.loads(value))
    return decode


def _json_table(key: str, from_doc: Callable[[Any], V]) -> Callable[[Any], Iterator[V]]:
    def from_json(doc: Any) -> Iterator[V]:
        for raw in (doc or {}).get(key, []):
            yield from_doc(raw)
    return from_json


def _check_version(version: int, what: str, name: str) -> None:
    if version != FORMAT_VERSION:
        raise ValueError(f"metadata {what} {name!r} has encoding version {version}; this broker reads "
                         f"{FORMAT_VERSION}")


# -- tables ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetadataTable(Generic[K, V]):
    name: str  # for logs
    json_file: str  # under <storePathRootDir>/config
    prefix: bytes  # RocksDB key prefix
    key_of: Callable[[V], K]
    encode_key: Callable[[K], bytes]  # without the prefix; may encode a key prefix (see delete_prefix)
    encode_value: Callable[[V], bytes]
    decode: Callable[[Iterable[tuple[bytes, bytes]]], Iterator[V]]  # (key without prefix, value) pairs
    from_json: Callable[[Any], Iterator[V]]
    to_json: Callable[[Iterable[V]], Any]
    secret: bool = False  # its JSON file is readable by the broker's user only (users' passwords)


def _str_key(name: str) -> bytes:
    return name.encode()


TOPICS: MetadataTable[str, TopicConfig] = MetadataTable(
    "topics", "topics.json", b"t:", lambda c: c.topic_name, _str_key, encode_topic, decode_topics,
    topics_from_json, topics_to_json)
GROUPS: MetadataTable[str, SubscriptionGroupConfig] = MetadataTable(
    "groups", "subscriptionGroup.json", b"g:", lambda g: g.group_name, _str_key, encode_group, decode_groups,
    groups_from_json, groups_to_json)
OFFSETS: MetadataTable[OffsetKey, OffsetRecord] = MetadataTable(
    "offsets", "consumerOffset.json", b"o:", offset_key, encode_offset_key, encode_offset, decode_offsets,
    offsets_from_json, offsets_to_json)
USERS: MetadataTable[str, User] = MetadataTable(
    "users", "users.json", b"u:", lambda u: u.username, _str_key, _json_value(user_to_doc),
    _json_decode(user_from_doc), _json_table("users", user_from_doc),
    lambda users: {"users": [user_to_doc(u) for u in users]}, secret=True)
ACLS: MetadataTable[str, Policy] = MetadataTable(
    "acls", "acls.json", b"a:", lambda p: p.subject, _str_key, _json_value(policy_to_doc),
    _json_decode(policy_from_doc), _json_table("acls", policy_from_doc),
    lambda policies: {"acls": [policy_to_doc(p) for p in policies]})
TABLES: tuple[MetadataTable[Any, Any], ...] = (TOPICS, GROUPS, OFFSETS, USERS, ACLS)
META_PREFIX = b"m:"
