"""Bad input: a clear error, nothing written, the store stays usable."""

import pytest

from broker.store.put_message_result import PutMessageStatus
from tests.store.conftest import StoreFactory


@pytest.mark.parametrize(
    ("topic", "queue_id", "bodies", "props", "status", "says"),
    [
        ("T", 0, [b"x" * (4 * 1024 * 1024 + 1)], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "maxMessageSize"),
        ("", 0, [b"x"], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "topic is empty"),
        ("T" * 128, 0, [b"x"], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "longer than 127"),
        ("bad topic!", 0, [b"x"], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "characters outside"),
        ("T.dot", 0, [b"x"], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "characters outside"),
        ("T", 0, [b"x"], [b"k\x01" + b"v" * 40000], PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "properties of"),
        ("T", -1, [b"x"], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "negative"),
        ("T", 0, [], [], PutMessageStatus.MESSAGE_ILLEGAL, "empty"),
        ("T", 0, [b""], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "body is empty"),
        ("T", 0, [b"x" * 70_000], [b""], PutMessageStatus.MESSAGE_ILLEGAL, "segment size"),
    ],
)
def test_bad_put_is_refused_and_store_stays_usable(open_store: StoreFactory, topic, queue_id, bodies, props,
                                                   status, says):
    store = open_store(max_message_size=4 * 1024 * 1024)
    before = store.commit_log.max_offset()
    r = store.put_messages(topic, queue_id, bodies, props)
    assert r.status is status and says in r.error
    assert store.commit_log.max_offset() == before
    ok = store.put_messages("GoodT", 0, [b"fine"], [b""])
    assert ok.ok and ok.queue_offset == 0


def test_put_on_a_stopped_store_is_refused(open_store: StoreFactory):
    store = open_store()
    store.shutdown()
    r = store.put_messages("T", 0, [b"x"], [b""])
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
