"""A send's batch as timer-topic records: the same messages (body, flag, born time and host, keys, tags, unique
key) in the timer topic's queue 0, their properties carrying where and when to deliver them. A batch is stored
as one, so it is all delayed or all immediate; a mix is refused.

Telling a delayed batch from an immediate one costs the send path one test over the batch's property blocks
joined (``is_delayed_needle_in``): 64 records of 1 KiB take about 11 us, against 57 us to parse them and 49 us
for the same test over the whole records (the needles are searched through every body). Only on a hit is each
record's properties looked at exactly.
"""

from collections.abc import Sequence

from broker.timer.delay_router import DelayRouter
from common.message_codec import HEADER, HEADER_SIZE, record_parts
from common.request_error import require
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from common.wire_batch import WireBatch

_TIMER_TOPIC = TIMER_TOPIC.encode()


def batch_dues(router: DelayRouter, properties: Sequence[bytes], now_ms: int) -> list[int] | None:
    """Each message's due time, or None when none is delayed. Raises RequestError for a mixed batch or a bad
    delay (see :meth:`DelayRouter.due_ms`)."""
    dues = [router.due_ms(p, now_ms) for p in properties]
    delayed = len(dues) - dues.count(None)
    if delayed == 0:
        return None
    require(delayed == len(dues), f"a batch is all delayed or all immediate: {delayed} of {len(dues)} messages are "
            "delayed; send them as separate batches")
    return dues  # type: ignore[return-value]  # no None left


def timer_properties(router: DelayRouter, properties: Sequence[bytes], real_topic: str, real_queue_id: int,
                     now_ms: int, logic_queue_id: int | None = None) -> list[bytes] | None:
    """A batch of bodies and properties (unary sends): the timer-topic properties of each, or None when the
    batch is not delayed. ``logic_queue_id``: a static topic's logic queue (``real_queue_id`` is physical)."""
    dues = batch_dues(router, properties, now_ms)
    if dues is None:
        return None
    return [router.timer_properties(p, real_topic, real_queue_id, due, logic_queue_id)
            for p, due in zip(properties, dues, strict=True)]


def timer_wire_batch(router: DelayRouter, batch: WireBatch, real_topic: str, real_queue_id: int,
                     now_ms: int, logic_queue_id: int | None = None) -> tuple[WireBatch, list[bytes]] | None:
    """A checked batch of records (``WireBatch.parse``) re-encoded as timer-topic records, with each record's
    properties there (its recall handle is read from them); None when it is not delayed (the needle ended another
    property's name: XDELAY)."""
    properties = batch.properties
    dues = batch_dues(router, properties, now_ms)
    if dues is None:
        return None
    records = []
    all_timer_props = []
    buf = batch.buf
    pos = 0
    for size, props, due in zip(batch.sizes, properties, dues, strict=True):
        h = HEADER.unpack_from(buf, pos)
        body = bytes(buf[pos + HEADER_SIZE + h[15] + h[16] : pos + size])
        timer_props = router.timer_properties(props, real_topic, real_queue_id, due, logic_queue_id)
        all_timer_props.append(timer_props)
        records.append(b"".join(record_parts(_TIMER_TOPIC, TIMER_QUEUE_ID, [body], [timer_props],
                                             born_timestamp=h[9], born_host=h[10], store_host=h[11], flag=h[4],
                                             sys_flag=h[8], reconsume_times=h[12])))
        pos += size
    return WireBatch.of_records(_TIMER_TOPIC, TIMER_QUEUE_ID, records), all_timer_props
