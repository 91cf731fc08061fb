"""SendAccumulator (``Producer(auto_batch=True)``): which sends leave together, and what each one is told.
The batch sender here is a stand-in whose requests finish when the test says; the daemons' side is in
``tests/integration/test_auto_batch.py``."""

import threading
import time
from concurrent.futures import Future

import pytest

from client.errors import MQClientError
from client.results import SendResult
from client.send_accumulator import SendAccumulator
from common.message import Message
from common.message_queue import MessageQueue
from common.response_code import ResponseCode
from tests.cluster import wait_until

MQ = MessageQueue("T", "broker-a", 3)


class Requests:
    """Each batch asked for, with the future that ends it; ``refuse`` names bodies that fail before sending."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[bytes], Future[SendResult]]] = []
        self.refuse: set[bytes] = set()

    def __call__(self, msgs: list[Message]) -> "Future[SendResult]":
        if self.refuse & {m.body for m in msgs}:
            raise MQClientError("cannot send: refused here")
        future: Future[SendResult] = Future()
        self.sent.append(([m.body for m in msgs], future))
        return future

    def bodies(self) -> list[list[bytes]]:
        return [bodies for bodies, _ in self.sent]

    def answer(self, i: int, queue_offset: int = 100) -> None:
        bodies, future = self.sent[i]
        future.set_result(SendResult(MQ, queue_offset, b"host0001", tuple(range(1000, 1000 + len(bodies))),
                                     wire_properties=tuple(b"p-" + b for b in bodies)))


def msg(body: bytes, topic: str = "T") -> Message:
    return Message(topic, body)


def test_a_lone_send_leaves_at_once_and_later_ones_leave_together_when_a_request_finishes():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    first = acc.add(msg(b"0"))
    assert requests.bodies() == [[b"0"]]  # nothing on its way: no wait
    rest = [acc.add(msg(b"%d" % i)) for i in range(1, 6)]
    assert requests.bodies() == [[b"0"]] and not any(f.done() for f in rest)
    requests.answer(0, queue_offset=7)
    assert first.result().queue_offset == 7
    assert requests.bodies() == [[b"0"], [b"1", b"2", b"3", b"4", b"5"]]  # one request for the five
    requests.answer(1, queue_offset=8)
    results = [f.result() for f in rest]
    assert [r.queue_offset for r in results] == [8, 9, 10, 11, 12]  # each its own offset
    assert [r.physical_offsets for r in results] == [(1000,), (1001,), (1002,), (1003,), (1004,)]
    assert [tuple(r.wire_properties) for r in results] == [(b"p-%d" % i,) for i in range(1, 6)]
    assert all(r.queue == MQ for r in results)


def test_a_full_batch_leaves_without_waiting_and_topics_batch_apart():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1, max_messages=3)
    acc.add(msg(b"a0"))
    acc.add(msg(b"b0", topic="U"))  # another topic has its own slots
    for i in range(1, 5):
        acc.add(msg(b"a%d" % i))
    assert requests.bodies() == [[b"a0"], [b"b0"], [b"a1", b"a2", b"a3"]]  # the third filled the batch
    requests.answer(0)
    assert requests.bodies()[-1] == [b"a4"]


def test_a_failed_request_fails_its_sends_and_the_next_ones_still_leave():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    first = acc.add(msg(b"0"))
    waiting = [acc.add(msg(b"1")), acc.add(msg(b"2"))]
    requests.sent[0][1].set_exception(MQClientError("broker gone"))
    with pytest.raises(MQClientError, match="broker gone"):
        first.result()
    assert requests.bodies()[1] == [b"1", b"2"]
    requests.sent[1][1].set_exception(MQClientError("still gone"))
    for future in waiting:
        with pytest.raises(MQClientError, match="still gone"):
            future.result()
    assert acc._topics == {}  # nothing left behind


def test_a_batch_refused_before_sending_goes_again_one_by_one_so_only_the_bad_message_fails():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"ok-0"))
    requests.refuse = {b"bad"}
    waiting = [acc.add(msg(b"ok-1")), acc.add(msg(b"bad")), acc.add(msg(b"ok-2"))]
    requests.answer(0)
    assert requests.bodies()[1:] == [[b"ok-1"], [b"ok-2"]]
    requests.answer(1)
    requests.answer(2)
    assert waiting[0].result().queue_offset == 100 and waiting[2].result().queue_offset == 100
    with pytest.raises(MQClientError, match="refused here"):
        waiting[1].result()


def test_a_cancelled_send_holds_nothing_up():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"0"))
    cancelled, kept = acc.add(msg(b"1")), acc.add(msg(b"2"))
    assert cancelled.cancel()
    requests.answer(0)
    requests.answer(1)
    assert kept.result().queue_offset == 101 and cancelled.cancelled()
    assert acc._topics == {}


def test_a_send_made_by_a_callback_leaves_at_once_from_that_callback():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    chained: list[Future[SendResult]] = []
    acc.add(msg(b"0")).add_done_callback(lambda _: chained.append(acc.add(msg(b"1"))))
    requests.answer(0)
    # The slot came back before the callback ran (on the SDK's callback pool, client/callback_future.py): the new
    # send did not wait for another request to finish.
    wait_until(lambda: len(chained) == 1, timeout=5, what="the callback's send")
    assert requests.bodies() == [[b"0"], [b"1"]]


def test_a_static_topic_s_undecided_offset_stays_undecided_for_each_send():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"0"))
    waiting = [acc.add(msg(b"1")), acc.add(msg(b"2"))]
    requests.answer(0)
    requests.answer(1, queue_offset=-1)
    assert [f.result().queue_offset for f in waiting] == [-1, -1]


def test_close_sends_what_waits_at_once_waits_for_the_answers_and_refuses_later_sends():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"0"))
    waiting = acc.add(msg(b"1"))
    answered = threading.Timer(0.2, lambda: [requests.answer(i) for i in range(len(requests.sent))])
    answered.start()
    acc.close(timeout_s=10)
    assert requests.bodies() == [[b"0"], [b"1"]]  # the waiting send left without its turn
    assert waiting.result(timeout=0).queue_offset == 100  # and close returned only once it was answered
    with pytest.raises(MQClientError, match="closed"):
        acc.add(msg(b"2"))


def test_close_gives_up_waiting_after_its_timeout():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"0"))  # never answered
    start = time.monotonic()
    acc.close(timeout_s=0.2)
    assert 0.2 <= time.monotonic() - start < 5


def test_a_message_that_would_take_a_batch_past_max_bytes_starts_the_next_one():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1, max_bytes=10)
    acc.add(msg(b"0"))
    for body in (b"aaaa", b"bbbb", b"cccc", b"d" * 12, b"e"):
        acc.add(msg(body))
    # "cccc" would have made 12 bytes: the first two left full; "d"*12 is over alone, and goes alone.
    assert requests.bodies() == [[b"0"], [b"aaaa", b"bbbb"], [b"cccc"], [b"d" * 12]]
    requests.answer(0)
    assert requests.bodies()[-1] == [b"e"]
    assert all(sum(map(len, bodies)) <= 10 for bodies in requests.bodies() if len(bodies) > 1)


def test_a_batch_the_broker_refuses_for_its_size_goes_again_one_by_one_and_each_gets_its_own_answer():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    acc.add(msg(b"0"))
    waiting = [acc.add(msg(b"1")), acc.add(msg(b"2"))]
    requests.answer(0)
    assert requests.bodies()[1] == [b"1", b"2"]
    requests.sent[1][1].set_exception(MQClientError(
        "send to T failed: INVALID_PARAMETER: batch of 300000 bytes exceeds maxMessageSize 100000",
        ResponseCode.INVALID_PARAMETER))
    assert requests.bodies()[2:] == [[b"1"], [b"2"]]
    later = acc.add(msg(b"3"))  # the two alone hold the slots: this one waits for one of them
    assert len(requests.sent) == 4
    requests.answer(2, queue_offset=7)
    requests.answer(3, queue_offset=8)
    assert [f.result(timeout=0).queue_offset for f in waiting] == [7, 8]
    assert requests.bodies()[4] == [b"3"]
    requests.answer(4)
    assert later.result(timeout=0).queue_offset == 100 and acc._topics == {}


def test_an_oversized_message_alone_keeps_the_broker_s_refusal():
    requests = Requests()
    acc = SendAccumulator(requests, max_in_flight=1)
    alone = acc.add(msg(b"big"))
    requests.sent[0][1].set_exception(MQClientError("message body of 9 bytes exceeds maxMessageSize 8",
                                                    ResponseCode.INVALID_PARAMETER))
    with pytest.raises(MQClientError, match="maxMessageSize"):
        alone.result(timeout=0)
    assert len(requests.sent) == 1 and acc._topics == {}
