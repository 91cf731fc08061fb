"""RecallMessage: a delayed message taken back before it is due, by the recall handle its send answered.

Under the timer store's ``delivery_lock`` (the delivery takes and delivers due timers under it) the timer is
looked up, checked to be the handle's message of the request's topic, and a marker naming it is appended to the
timer topic; the answer waits until the dispatch chain applied the marker, which deletes the timer. So a SUCCESS
means the message will not be delivered, here or after a crash (recovery replays the marker), and a message
delivered first is answered QUERY_NOT_FOUND. Blocks on the store: called off the event loop.
"""

import logging
from collections.abc import Callable

from broker.processor.request_checks import checked_send_topic
from broker.store.message_store import MessageStore
from broker.timer.timer_message_store import TimerMessageStore
from broker.timer.timer_recall import is_handle_of, marker_properties
from common.recall_handle import InvalidRecallHandle, RecallHandle
from common.refusal import Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from proto import broker_pb2

log = logging.getLogger(__name__)

MARKER_APPLY_TIMEOUT_S = 10.0


class RecallMessageProcessor:
    def __init__(self, broker_name: str, timers: Callable[[], TimerMessageStore | None], store: MessageStore,
                 is_master: Callable[[], bool]) -> None:
        self.broker_name = broker_name
        self.timers = timers  # the timer store, once the message store attached it
        self.store = store  # the local store: the marker is written to this broker's commitlog
        self.is_master = is_master  # the role may change (controller mode)

    def recall(self, request: broker_pb2.RecallMessageRequest) -> broker_pb2.RecallMessageResponse:
        topic = checked_send_topic(request.topic)
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except InvalidRecallHandle as exc:
            raise RequestError(str(exc)) from None
        if handle.broker_name != self.broker_name:
            raise Refusal(ResponseCode.NO_PERMISSION, f"the recall handle is of broker {handle.broker_name}, this is "
                          f"{self.broker_name}: recall on that broker's master")
        timers = self.timers()
        if timers is None or not self.is_master():
            raise Refusal(ResponseCode.NO_PERMISSION, f"this replica of broker {self.broker_name} is a slave: recall "
                          "on its group's master")
        with timers.delivery_lock:
            record = timers.pending_record(handle.due_ms, handle.physical_offset)
            if record is None or not is_handle_of(record, topic, handle):
                raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"message {handle.message_id} of topic {topic} is not "
                              f"pending on broker {self.broker_name}: delivered already, recalled, or not sent here")
            self._take_back(topic, handle)
        log.info("message_recalled topic=%s msg_id=%s due_ms=%d timer_offset=%d", topic, handle.message_id,
                 handle.due_ms, handle.physical_offset)
        return broker_pb2.RecallMessageResponse(code=ResponseCode.SUCCESS, message_id=handle.message_id)

    def _take_back(self, topic: str, handle: RecallHandle) -> None:
        """Append the marker and wait until it was applied (the timer deleted)."""
        result = self.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, [handle.message_id.encode()],
                                         [marker_properties(topic, handle)])
        if result.append is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"the commitlog refused the recall: {result.error}")
        if not self.store.wait_dispatched(result.append.end_offset, MARKER_APPLY_TIMEOUT_S):
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"the recall was stored but not applied within "
                          f"{MARKER_APPLY_TIMEOUT_S:.0f} s: the message may still be delivered")
