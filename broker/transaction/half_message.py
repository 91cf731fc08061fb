"""Half messages: how a send's message is stored in the half topic, and what becomes of it (the committed message,
the message a check shows its producer, the copy kept when its checks run out).

A message is a half message when its properties say ``TRAN_MSG=true`` (upstream's test; the record's sys_flag is
set to PREPARED too). It is sent alone, names its producer group (``PGROUP``), and is never delayed: its delivery
is the commit. Telling one from an ordinary send costs the send path one ``in`` test over the property blocks.
"""

import logging
from collections.abc import Sequence

from broker.processor.request_checks import checked_group
from common.message import MessageExt
from common.message_codec import HEADER, HEADER_SIZE, record_parts
from common.message_properties import (
    DELAY_NEEDLE,
    MAX_PROPERTIES_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    REAL_QID_NEEDLE,
    REAL_TOPIC_NEEDLE,
    TIMER_DELIVER_MS_NEEDLE,
    find_property,
    strip_properties,
)
from common.request_error import require
from common.transaction_topic import (
    HALF_QUEUE_ID,
    HALF_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    with_transaction_type,
)
from common.wire_batch import WireBatch

log = logging.getLogger(__name__)

HALF_NEEDLE = f"{PROPERTY_TRANSACTION_PREPARED}{NAME_VALUE_SEPARATOR}".encode()
PGROUP_NEEDLE = f"{PROPERTY_PRODUCER_GROUP}{NAME_VALUE_SEPARATOR}".encode()
_HALF_TOPIC = HALF_TOPIC.encode()
_SEP = PROPERTY_SEPARATOR.encode()
_ROUTING = frozenset(p.encode() for p in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID))
# What a committed message no longer carries: it is an ordinary message of its topic (PGROUP stays, as upstream).
_TRANSACTION_ONLY = _ROUTING | {p.encode() for p in (PROPERTY_TRANSACTION_PREPARED, PROPERTY_TRANSACTION_CHECK_TIMES,
                                                       PROPERTY_TRANSACTION_ID)}


def is_half_needle_in(raw: bytes) -> bool:
    """The cheap first test over a batch's property blocks joined: False means no message of it is a half
    message; True may be another property's name ending so (``XTRAN_MSG``): each is then looked at exactly."""
    return HALF_NEEDLE in raw


def is_prepared(raw_properties: bytes) -> bool:
    value = find_property(raw_properties, HALF_NEEDLE)
    return value is not None and value.lower() == b"true"


def half_properties(properties: Sequence[bytes], real_topic: str, real_queue_id: int,
                    static: bool) -> list[bytes] | None:
    """The half-topic properties of a send's messages, or None when they are not half messages. Raises
    RequestError for a half message in a batch, one without its producer group, a delayed one, or one for a
    static topic."""
    prepared = sum(map(is_prepared, properties))
    if prepared == 0:
        return None
    require(prepared == len(properties) == 1, "a transactional message is sent alone: this batch has "
            f"{len(properties)} messages, {prepared} of them half messages (TRAN_MSG=true)")
    props = properties[0]
    group = find_property(props, PGROUP_NEEDLE)
    require(bool(group), f"a half message names its producer group ({PROPERTY_PRODUCER_GROUP}): the broker asks that "
            "group's producers about a transaction nobody ends")
    checked_group(group.decode(errors="replace") if group else "", "producer")
    delay = find_property(props, DELAY_NEEDLE)
    require((delay is None or delay == b"0") and find_property(props, TIMER_DELIVER_MS_NEEDLE) is None,
            "a transactional message cannot be delayed (delay_level / deliver_at_ms): its commit delivers it")
    require(not static, f"topic {real_topic} is a static topic: transactional messages on static topics are not "
            "supported")
    return [_with_target(props, real_topic, real_queue_id)]


def _with_target(props: bytes, real_topic: str, real_queue_id: int) -> bytes:
    if REAL_TOPIC_NEEDLE in props or REAL_QID_NEEDLE in props:
        props = strip_properties(props, _ROUTING)
    elif props and not props.endswith(_SEP):
        props += _SEP
    return props + (f"{PROPERTY_REAL_TOPIC}\x01{real_topic}\x02{PROPERTY_REAL_QID}\x01{real_queue_id}\x02").encode()


def half_wire_batch(batch: WireBatch, real_topic: str, real_queue_id: int, static: bool) -> WireBatch | None:
    """A checked batch of records (``WireBatch.parse``) as the half topic's record, or None when it holds no half
    message."""
    half_props = half_properties(batch.properties, real_topic, real_queue_id, static)
    if half_props is None:
        return None
    h = HEADER.unpack_from(batch.buf, 0)
    body = bytes(batch.buf[HEADER_SIZE + h[15] + h[16] : batch.sizes[0]])
    record = b"".join(record_parts(_HALF_TOPIC, HALF_QUEUE_ID, [body], half_props, born_timestamp=h[9],
                                   born_host=h[10], store_host=h[11], flag=h[4],
                                   sys_flag=with_transaction_type(h[8], TRANSACTION_PREPARED_TYPE),
                                   reconsume_times=h[12]))
    return WireBatch.of_records(_HALF_TOPIC, HALF_QUEUE_ID, [record])


def real_target(msg: MessageExt) -> tuple[str, int] | None:
    """Where the half message goes when committed; None when its routing properties are missing or bad (only the
    broker writes the half topic: another version's record, or a bug)."""
    topic = find_property(msg.raw_properties, REAL_TOPIC_NEEDLE)
    qid = find_property(msg.raw_properties, REAL_QID_NEEDLE)
    if not topic or qid is None or not qid.isdigit() or len(qid) > 9:
        return None
    return topic.decode(errors="replace"), int(qid)


def producer_group(msg: MessageExt) -> str:
    return (find_property(msg.raw_properties, PGROUP_NEEDLE) or b"").decode(errors="replace")


def committed_record(msg: MessageExt, topic: str, queue_id: int, store_host: bytes) -> bytes:
    """The real message of a committed half message: its body, flag, born time and host, keys, tags and unique
    key, without the transaction's properties; sys_flag COMMIT, as upstream."""
    props = strip_properties(msg.raw_properties, _TRANSACTION_ONLY)
    return b"".join(record_parts(topic.encode(), queue_id, [msg.body], [props], born_timestamp=msg.born_timestamp,
                                 born_host=msg.raw_born_host, store_host=store_host, flag=msg.flag,
                                 sys_flag=with_transaction_type(msg.sys_flag, TRANSACTION_COMMIT_TYPE),
                                 reconsume_times=msg.reconsume_times))


def check_record(msg: MessageExt, topic: str, queue_id: int, transaction_id: str, check_times: int) -> bytes:
    """The half message as its producer sent it, for a check: its real topic and queue, its properties (TRAN_MSG
    and PGROUP kept; the transaction id and this check's number added, as upstream's check message carries them),
    its times and the half's commitlog offset. Queue offset -1: it has no place in its queue until committed."""
    props = strip_properties(msg.raw_properties, _ROUTING | {PROPERTY_TRANSACTION_ID.encode(),
                                                            PROPERTY_TRANSACTION_CHECK_TIMES.encode()})
    props += (f"{PROPERTY_TRANSACTION_ID}\x01{transaction_id}\x02"
              f"{PROPERTY_TRANSACTION_CHECK_TIMES}\x01{check_times}\x02").encode()
    return b"".join(record_parts(topic.encode(), queue_id, [msg.body], [props], born_timestamp=msg.born_timestamp,
                                 born_host=msg.raw_born_host, store_host=msg.raw_store_host, flag=msg.flag,
                                 sys_flag=msg.sys_flag, reconsume_times=msg.reconsume_times, queue_offset=-1,
                                 physical_offset=msg.physical_offset, store_timestamp=msg.store_timestamp))


def discard_record(msg: MessageExt, check_times: int, store_host: bytes) -> bytes:
    """The copy of a half message whose checks ran out, for TRANS_CHECK_MAX_TIME_TOPIC: every property kept (its
    real topic and queue included, for whoever looks at it), with how often it was checked when that fits the
    store's limit (a block stored before sends left room for it may not have it: copied without the count)."""
    props = strip_properties(msg.raw_properties, {PROPERTY_TRANSACTION_CHECK_TIMES.encode()})
    counted = props + f"{PROPERTY_TRANSACTION_CHECK_TIMES}\x01{check_times}\x02".encode()
    if len(counted) <= MAX_PROPERTIES_SIZE:
        props = counted
    else:
        log.warning("transaction_discard_count_left_out offset_msg_id=%s properties=%d reason='no room in the "
                    "properties'", msg.offset_msg_id, len(counted))
    return b"".join(record_parts(TRANS_CHECK_MAX_TIME_TOPIC.encode(), 0, [msg.body], [props],
                                 born_timestamp=msg.born_timestamp, born_host=msg.raw_born_host, store_host=store_host,
                                 flag=msg.flag, sys_flag=msg.sys_flag, reconsume_times=msg.reconsume_times))
