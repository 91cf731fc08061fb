"""RecallMessage: a delayed message taken back before it is due, by the recall handle its send answered.

First the recall waits (briefly) for the timer's record to reach the timer store: a send is answered once appended,
and a reput pass stores the timer after that. Then, under the timer store's ``delivery_lock`` (the delivery
takes and delivers due timers under it), the timer is looked up and checked to be the handle's message of the
request's topic; a marker naming it is appended to the timer topic's queue of markers, then the timer is deleted.
So a SUCCESS means the message is not delivered, and a message delivered first is answered QUERY_NOT_FOUND. The
marker makes the recall as durable as a send in the broker's flush mode: recovery and slaves replay it. A
SYNC_MASTER answers once its slaves have it (the servicer). Blocks on the store (a SYNC_FLUSH fsync): called off
the event loop.
"""

import logging
from collections.abc import Callable

from broker.processor.request_checks import checked_send_topic
from broker.store.message_store import MessageStore
from broker.store.put_message_result import PutMessageStatus
from broker.timer.timer_message_store import TimerMessageStore, marker_body, timer_key
from broker.timer.timer_recall import is_handle_of, marker_properties
from common.recall_handle import InvalidRecallHandle, RecallHandle
from common.refusal import NOT_GROUP_MASTER, Refusal
from common.request_error import RequestError
from common.response_code import ResponseCode
from common.timer_topic import TIMER_DELETES_QUEUE_ID, TIMER_TOPIC
from proto import broker_pb2

log = logging.getLogger(__name__)

DISPATCH_WAIT_S = 1.5  # well within the SDK's and the proxy's 3 s call timeout


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
            raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"the recall handle names broker {handle.broker_name}, not "
                          f"{self.broker_name}: its message is not pending here")
        if not self.is_master():
            raise Refusal(ResponseCode.NO_PERMISSION, f"this replica of broker {self.broker_name} is a slave (it "
                          f"{NOT_GROUP_MASTER}): recall on its group's master")
        timers = self.timers()
        if timers is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, "the timer store is not loaded yet")
        self._wait_stored(handle)
        with timers.delivery_lock:
            record = timers.pending_record(handle.due_ms, handle.physical_offset)
            if record is None or not is_handle_of(record, topic, handle):
                raise Refusal(ResponseCode.QUERY_NOT_FOUND, f"message {handle.message_id} of topic {topic} is not "
                              f"pending on broker {self.broker_name}: delivered already, recalled, or not sent here")
            key = timer_key(handle.due_ms, handle.physical_offset)
            result = self.store.put_messages(TIMER_TOPIC, TIMER_DELETES_QUEUE_ID, [marker_body([key])],
                                             [marker_properties(topic, handle)])
            if result.append is None:
                raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"the recall was not stored: {result.error}")
            if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:  # written, its fsync failed: fail-stop
                raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"the recall may not be on disk ({result.error}): "
                              "whether the message is delivered is decided when the broker restarts")
            timers.remove([key])
        log.info("message_recalled topic=%s msg_id=%s due_ms=%d timer_offset=%d marker_offset=%d", topic,
                 handle.message_id, handle.due_ms, handle.physical_offset, result.append.physical_offsets[0])
        code = ResponseCode.SUCCESS if result.ok else ResponseCode.FLUSH_DISK_TIMEOUT  # recalled, not yet on disk
        return broker_pb2.RecallMessageResponse(code=code, message_id=handle.message_id)

    def _wait_stored(self, handle: RecallHandle) -> None:
        """Until the timer's record reached the timer store: a send is answered once appended, and a recall right
        after it may come before the dispatch chain got there."""
        commit_log = self.store.commit_log
        if handle.physical_offset >= commit_log.max_offset():
            return  # never written here: found pending by nobody
        if commit_log.replication_gated and handle.physical_offset >= commit_log.confirm_offset:
            raise Refusal(ResponseCode.SLAVE_NOT_AVAILABLE, f"the timer of message {handle.message_id} is not "
                          "confirmed by this master's slaves yet: retry once they have it")
        if not self.store.wait_dispatched(handle.physical_offset + 1, DISPATCH_WAIT_S):
            if self.store.reput.failed:
                raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, "the dispatch chain stopped (see the broker's "
                              "log): no recall until the broker restarts")
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"the timer of message {handle.message_id} did not reach the "
                          f"timer store within {DISPATCH_WAIT_S:g} s: retry")
