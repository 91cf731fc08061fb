"""v2 messages to the project's messages (send) and stored records to v2 messages (receive).

Send: ``system_properties`` become the project's properties: tag -> TAGS, keys -> KEYS, message_id -> UNIQ_KEY
(kept, so a receive answers the id the producer was given), message_group -> ``__SHARDINGKEY`` (what POP's FIFO
reads), born_host -> ``__BORNHOST`` (answered back to consumers: the record's born host is the proxy's),
born_timestamp -> the record's born time, and delivery_timestamp -> ``deliver_at_ms`` (the broker's timer). Every
property name the project reserves (``common/message_properties.py``) is refused as a user property: a client must
not forge routing or retry state.
"""

import hashlib
import zlib
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from client.errors import MQClientError
from client.message_encoding import wire_properties
from common.message import Message, MessageExt
from common.message_properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_BORN_HOST,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_UNIQUE_KEY,
    RESERVED_PROPERTIES,
)
from common.topic_validator import InvalidTopicError, validate_user_send_topic
from proto.v2 import definition_pb2
from proxy.v2_codes import Code, ProxyError

# RESERVED_PROPERTIES (common/message_properties.py) include the transactions' (TRAN_MSG, PGROUP,
# __transactionId__, TRANSACTION_CHECK_TIMES): a client must not make a normal send a half message, and a check's
# message or a committed one shows them to no v2 client as user properties (upstream hides them as well).
MAX_MESSAGE_ID_CHARS = 128
MAX_MESSAGE_GROUP_CHARS = 64  # upstream's maxMessageGroupSize
MAX_BORN_HOST_CHARS = 255  # a host name's limit
GZIP_WBITS = 31  # zlib's window bits for a GZIP member (header and trailer checked)
MessageType = definition_pb2.MessageType
_SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A v2 message ready for the SDK's producer."""

    message: Message
    message_id: str
    message_group: str | None  # FIFO: the producer's sharding key too, so a group stays on one queue
    transactional: bool
    born_timestamp: int = 0  # epoch ms the client made it (0: not said, the proxy's now)


def to_outgoing(msg: definition_pb2.Message, max_body_size: int) -> OutgoingMessage:
    """Validate a v2 message and convert it; :class:`ProxyError` names the first thing wrong."""
    topic = msg.topic.name
    try:
        validate_user_send_topic(topic)
    except InvalidTopicError as exc:
        raise ProxyError(Code.ILLEGAL_TOPIC, f"cannot send: {exc}") from None
    sp = msg.system_properties
    body = _body(msg, max_body_size)
    message_id = sp.message_id
    if not message_id or len(message_id) > MAX_MESSAGE_ID_CHARS or _has_separator(message_id):
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, f"message id {message_id[:40]!r} is empty, longer than "
                                                  f"{MAX_MESSAGE_ID_CHARS} chars or has a control character")
    tag = sp.tag if sp.HasField("tag") else None
    if tag is not None and (not tag.strip() or "|" in tag or _has_separator(tag)):
        raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag[:40]!r} is blank or has '|' or a control character")
    keys = list(sp.keys)
    if any(not key.strip() or _has_separator(key) for key in keys):
        raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "a message key is blank or has a control character")
    group = sp.message_group if sp.HasField("message_group") else None
    if group is not None and (not group.strip() or len(group) > MAX_MESSAGE_GROUP_CHARS or _has_separator(group)):
        raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group[:40]!r} is blank, longer than "
                                                     f"{MAX_MESSAGE_GROUP_CHARS} chars or has a control character")
    deliver_at_ms = _delivery_ms(sp) if sp.HasField("delivery_timestamp") else 0
    transactional = _check_type(sp.message_type, group, sp.HasField("delivery_timestamp"))
    properties = _user_properties(msg)
    properties[PROPERTY_UNIQUE_KEY] = message_id
    if group is not None:
        properties[PROPERTY_SHARDING_KEY] = group
    if sp.born_host and len(sp.born_host) <= MAX_BORN_HOST_CHARS and not _has_separator(sp.born_host):
        properties[PROPERTY_BORN_HOST] = sp.born_host  # (a client's own, not checked further: a name it reports)
    message = Message(topic, body, tags=tag, keys=keys or None, properties=properties, deliver_at_ms=deliver_at_ms)
    _check_properties_size(message, message_id)
    return OutgoingMessage(message, message_id, group, transactional, _born_ms(sp))


def compressed(msg: definition_pb2.Message) -> bool:
    """Whether the body is GZIP (the Java client compresses large bodies): converting it is worth a thread."""
    return msg.system_properties.body_encoding == definition_pb2.GZIP


def _check_properties_size(message: Message, message_id: str) -> None:
    """The properties as the SDK writes them (tags and keys among them) must fit the broker's limit; the SDK says
    so only once sending, as an error without a code."""
    try:
        wire_properties(message, message_id)
    except MQClientError as exc:  # everything else it checks was refused above with its own code
        raise ProxyError(Code.MESSAGE_PROPERTIES_TOO_LARGE, str(exc)) from None


def _body(msg: definition_pb2.Message, max_body_size: int) -> bytes:
    body = _gunzip(msg.body, max_body_size) if compressed(msg) else msg.body
    if not body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body_size:
        raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body is {len(body)} bytes, more than the "
                                                      f"{max_body_size} allowed")
    return body


def _gunzip(data: bytes, max_body_size: int) -> bytes:
    """A GZIP body (one member or several, as gzip.decompress takes it) decompressed to at most ``max_body_size``
    bytes: a small body may stand for gigabytes, so no more than one byte past the limit is ever made."""
    out = bytearray()
    try:
        while data:
            member = zlib.decompressobj(wbits=GZIP_WBITS)
            out += member.decompress(data, max_body_size + 1 - len(out))  # never 0 (unbounded): out <= limit here
            if len(out) > max_body_size or member.unconsumed_tail:
                raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body decompresses to more than the "
                                                              f"{max_body_size} bytes allowed")
            if not member.eof:
                raise ProxyError(Code.MESSAGE_CORRUPTED, "body is not the GZIP its encoding says: it is truncated")
            data = member.unused_data.lstrip(b"\0")  # the next member; zero padding after the last is allowed
    except zlib.error as exc:
        raise ProxyError(Code.MESSAGE_CORRUPTED, f"body is not the GZIP its encoding says: {exc}") from None
    return bytes(out)


def _delivery_ms(sp: definition_pb2.SystemProperties) -> int:
    ts = sp.delivery_timestamp
    ms = ts.seconds * 1000 + ts.nanos // 1_000_000
    if ms < 0 or not 0 <= ts.nanos < 1_000_000_000:
        raise ProxyError(Code.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {ts.seconds}s {ts.nanos}ns is not a time")
    return ms


def _born_ms(sp: definition_pb2.SystemProperties) -> int:
    """The client's born time in epoch ms (0: not said); one that is no time (past year 9999, nanos out of range)
    is refused: it failed the whole request, whose other messages were stored, so a client's retry doubled them."""
    if not sp.HasField("born_timestamp"):
        return 0
    ts = sp.born_timestamp
    try:
        return max(ts.ToMilliseconds(), 0)
    except ValueError:
        raise ProxyError(Code.BAD_REQUEST, f"born timestamp {ts.seconds}s {ts.nanos}ns is not a time") from None


def _check_type(message_type: int, group: str | None, delayed: bool) -> bool:
    """Whether the message is transactional; the type must agree with the properties (as upstream checks)."""
    if message_type in (MessageType.LITE, MessageType.PRIORITY):
        raise ProxyError(Code.UNSUPPORTED, f"{MessageType.Name(message_type)} messages are not supported")
    if message_type == MessageType.FIFO:
        fits = group is not None and not delayed
    elif message_type == MessageType.DELAY:
        fits = delayed and group is None
    elif message_type in (MessageType.NORMAL, MessageType.TRANSACTION):
        fits = group is None and not delayed
    else:  # unspecified (or unknown): anything but a message group and a delivery time at once
        fits = not (group is not None and delayed)
    if not fits:
        name = MessageType.Name(message_type) if message_type in MessageType.values() else str(message_type)
        raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"message type {name} does not fit the message "
                                                                   f"(message group: {group is not None}, "
                                                                   f"delivery time: {delayed})")
    return message_type == MessageType.TRANSACTION


def _user_properties(msg: definition_pb2.Message) -> dict[str, str]:
    properties = dict(msg.user_properties)
    for name, value in properties.items():
        if not name or name in RESERVED_PROPERTIES or _has_separator(name) or _has_separator(value):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name[:40]!r} is empty, reserved "
                                                                "or has a control character")
    return properties


def _has_separator(text: str) -> bool:
    return any(sep in text for sep in _SEPARATORS)


# -- receive -----------------------------------------------------------------------------------------------------
def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


def body_digest(body: bytes) -> definition_pb2.Digest:
    """MD5 in upper-case hex, as upstream's proxy sends it: every official client computes it alike. (A CRC32 is
    written with 8 digits by the Python and C++ clients but without leading zeros by Java, Go and C#, and in decimal
    by Node: such a client took about 1 body in 16, and Node every one, for corrupted, and a PushConsumer
    dead-lettered them.)"""
    return definition_pb2.Digest(type=definition_pb2.MD5, checksum=hashlib.md5(body).hexdigest().upper())


def to_v2_message(ext: MessageExt, topic: str, receipt_handle: str, reconsume_times: int,
                  invisible_ms: int) -> definition_pb2.Message:
    """A popped record as a v2 message. ``topic`` is the topic the client receives from (the record's own may be a
    system topic the broker keeps in-flight messages of); the attempt counts deliveries, the first being 1."""
    properties = ext.properties
    group = properties.get(PROPERTY_SHARDING_KEY)
    sp = definition_pb2.SystemProperties(
        keys=ext.keys, message_id=ext.msg_id, body_digest=body_digest(ext.body), body_encoding=definition_pb2.IDENTITY,
        message_type=MessageType.FIFO if group else MessageType.NORMAL,
        born_timestamp=timestamp(ext.born_timestamp),
        born_host=properties.get(PROPERTY_BORN_HOST) or ext.born_host.rpartition(":")[0],
        store_timestamp=timestamp(ext.store_timestamp), store_host=ext.store_host, receipt_handle=receipt_handle,
        queue_id=ext.queue_id, queue_offset=ext.queue_offset, invisible_duration=duration(invisible_ms),
        delivery_attempt=reconsume_times + 1)
    if ext.tags:
        sp.tag = ext.tags
    if group:
        sp.message_group = group
    user = {name: value for name, value in properties.items() if name not in RESERVED_PROPERTIES}
    return definition_pb2.Message(topic=definition_pb2.Resource(name=topic), user_properties=user,
                                  system_properties=sp, body=ext.body)
