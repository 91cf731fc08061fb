"""The SDK's ack batching (``client/ack_batcher.py``): one request on its way, later acks merged into the next;
each caller hears its own handles' outcome; nothing that goes wrong keeps later acks from going."""

from concurrent.futures import Future
from typing import Any

from client.ack_batcher import AckBatcher, ack_outcomes
from common.response_code import ResponseCode
from proto import pop_pb2


class Broker:
    """Answers each request when told to; refuses the handles in ``stale``."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        self.answers: list[Future] = []
        self.stale: set[str] = set()
        self.fail_next_send = False

    def send(self, request: pop_pb2.AckMessageRequest) -> Future:
        if self.fail_next_send:
            self.fail_next_send = False
            raise RuntimeError("no route now")
        self.requests.append(list(request.receipt_handles))
        self.answers.append(Future())
        return self.answers[-1]

    def answer(self) -> None:
        handles = self.requests[len([a for a in self.answers if a.done()])]
        refused = [pop_pb2.AckResult(receipt_handle=h, code=ResponseCode.INVALID_RECEIPT_HANDLE, remark="stale")
                   for h in handles if h in self.stale]
        code = ResponseCode.INVALID_RECEIPT_HANDLE if refused else ResponseCode.SUCCESS
        next(a for a in self.answers if not a.done()).set_result(pop_pb2.AckMessageResponse(code=code,
                                                                                             results=refused))


def caller(outcomes: dict[str, Any], name: str):
    def on_answer(handles: list[str], answer: Future) -> None:
        try:
            outcomes[name] = ack_outcomes(handles, answer.result())
        except Exception as exc:
            outcomes[name] = exc
    return on_answer


def test_acks_wait_for_the_request_on_its_way_and_go_together_each_caller_hearing_its_own():
    broker, outcomes = Broker(), {}
    batcher = AckBatcher("g", "T", broker.send)
    batcher.ack(["h1"], caller(outcomes, "first"))
    batcher.ack(["h2", "h3"], caller(outcomes, "second"))
    batcher.ack(["h4"], caller(outcomes, "third"))
    assert broker.requests == [["h1"]]  # the others wait for its answer
    broker.stale = {"h4"}
    broker.answer()
    assert outcomes == {"first": [None]} and broker.requests == [["h1"], ["h2", "h3", "h4"]]
    broker.answer()
    assert outcomes["second"] == [None, None]
    assert outcomes["third"] == [(ResponseCode.INVALID_RECEIPT_HANDLE, "stale")]
    batcher.ack(["h5"], caller(outcomes, "later"))  # idle again: goes at once
    assert broker.requests[-1] == ["h5"]


def test_a_request_that_cannot_go_or_a_caller_that_raises_keeps_no_later_ack_waiting():
    broker, outcomes = Broker(), {}
    batcher = AckBatcher("g", "T", broker.send)
    broker.fail_next_send = True
    batcher.ack(["h1"], caller(outcomes, "unlucky"))
    assert isinstance(outcomes["unlucky"], RuntimeError)

    def broken(handles: list[str], answer: Future) -> None:
        raise ValueError("a caller's bug")

    batcher.ack(["h2"], broken)
    batcher.ack(["h3"], caller(outcomes, "waiting"))
    broker.answer()  # h2's caller raises while settling
    assert broker.requests[-1] == ["h3"]  # still sent
    broker.answer()
    assert outcomes["waiting"] == [None]


def test_outcomes_of_an_older_broker_that_lists_every_handle_and_of_a_whole_request_refused():
    older = pop_pb2.AckMessageResponse(code=ResponseCode.INVALID_RECEIPT_HANDLE, results=[
        pop_pb2.AckResult(receipt_handle="a", code=ResponseCode.SUCCESS),
        pop_pb2.AckResult(receipt_handle="b", code=ResponseCode.INVALID_RECEIPT_HANDLE, remark="stale")])
    assert ack_outcomes(["a", "b"], older) == [None, (ResponseCode.INVALID_RECEIPT_HANDLE, "stale")]
    whole = pop_pb2.AckMessageResponse(code=ResponseCode.NO_PERMISSION, remark="a slave")
    assert ack_outcomes(["a"], whole) == [(ResponseCode.NO_PERMISSION, "a slave")]
