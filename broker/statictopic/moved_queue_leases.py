"""Orderly leases of a static topic's logic queue that just moved here (a remap, migrate, drain or rebalance).

A lease is held at the queue's leader. After a move, a member may still be consuming the queue under a lease taken
at the previous leader (its next renewal, at most 20 s later, is when it learns of the move), while the new leader,
holding no lease for the queue, granted it at once to another member: both handled the queue's messages at once,
out of order (the push-static review). So before the new leader grants a logic queue it has no lease for, it asks
the previous leader who holds one there (``LockBatchMQ`` with ``holders_only``): a live holder gets the lease here
too and everyone else waits until it lets go; none, or the asker, and the queue is granted. A previous leader that
cannot be reached is waited for at most a lease time (it refuses renewals since the move, so its leases end by
then). Asked once per group, queue and leader link (waiting a second at most: see HOLDERS_TIMEOUT_S), and only
within twice a lease time of the link's start (its ``time_of_start``, the admin's clock: a lease time of margin for
skew); pure state besides the one peer call.
"""

import logging
import threading
import time
from collections.abc import Callable

from broker.client.consumer_manager import QueueRef, monotonic_ms
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.out.peer_brokers import PeerBrokerError
from broker.statictopic.static_topic_service import StaticTopicService
from common.statictopic.logic_queue_mapping_item import LOGICAL_QUEUE_MOCK_BROKER_NAME
from proto import consumer_pb2, consumer_pb2_grpc
from proto.broker_pb2 import LOGIC

log = logging.getLogger(__name__)

LinkKey = tuple[str, QueueRef, int]  # group, logic queue, the leader link's generation
# The previous leader's answer is waited for this long, once a link: a lock request renews a member's every queue at
# this broker, and one waiting a peer call's 10 s on a hung previous leader timed out whole (the diff review: a queue
# that never moved stalled 88 s)
HOLDERS_TIMEOUT_S = 1.0


class MovedQueueLeases:
    def __init__(self, broker_name: str, static_topics: StaticTopicService, locks: RebalanceLockManager,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.broker_name = broker_name
        self.static_topics = static_topics
        self.locks = locks
        self._wall_ms = wall_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._settled: set[LinkKey] = set()  # asked (or past asking): the leases here decide
        self._unanswered_since: dict[LinkKey, int] = {}  # previous leader unreachable since (clock_ms)

    def allows(self, group: str, client_id: str, queue: QueueRef) -> bool:
        """Whether ``client_id`` may take ``queue`` (one this broker leads) as far as its previous leader goes."""
        if queue[1] != LOGICAL_QUEUE_MOCK_BROKER_NAME or self.locks.holder(group, queue) is not None:
            return True  # a normal queue, or a lease here decides
        ctx = self.static_topics.context(queue[0], queue[2], LOGIC)
        if ctx is None or len(ctx.chain) < 2:
            return True
        leader, previous = ctx.chain[-1], ctx.chain[-2]
        key = (group, queue, leader.gen)
        with self._lock:
            if key in self._settled:
                return True
            since = self._unanswered_since.get(key)
        if since is not None:  # asked once, unanswered: not asked again, granted once its leases surely ended
            return self._clock_ms() - since >= self.locks.lease_ms and self._settle(key)
        if previous.bname == self.broker_name or self._wall_ms() - leader.time_of_start > 2 * self.locks.lease_ms:
            return self._settle(key)  # the same broker's leases, or a move long ago: its leases ended
        try:
            holder = self._holder_at(previous.bname, group, queue)
        except PeerBrokerError as exc:
            return self._unanswered(key, previous.bname, exc)
        if holder and holder != client_id:
            self.locks.seed(group, queue, holder)  # it renews here; the others wait for it to let go
            log.info("moved_queue_lease_kept group=%s topic=%s logic_queue=%d holder=%s previous_leader=%s "
                     "denied=%s", group, queue[0], queue[2], holder, previous.bname, client_id)
        return self._settle(key) and (not holder or holder == client_id)

    def _holder_at(self, bname: str, group: str, queue: QueueRef) -> str:
        request = consumer_pb2.LockBatchRequest(group=group, holders_only=True, queues=[consumer_pb2.QueueRef(
            topic=queue[0], broker_name=queue[1], queue_id=queue[2])])
        response = self.static_topics.peer_brokers.call(bname, "LockBatchMQ", request,
                                                        service=consumer_pb2_grpc.ConsumerServiceStub,
                                                        timeout_s=HOLDERS_TIMEOUT_S)
        return response.held[0].client_id if response.held else ""

    def _unanswered(self, key: LinkKey, bname: str, exc: PeerBrokerError) -> bool:
        """The previous leader could not say (down, hung, an older release): its leases have surely ended a lease
        time after this first ask; refused until then, without asking again."""
        with self._lock:
            self._unanswered_since.setdefault(key, self._clock_ms())
        log.warning("moved_queue_lease_unknown group=%s topic=%s logic_queue=%d previous_leader=%s error=%s: granted "
                    "once its leases have surely ended (in %d ms)", key[0], key[1][0], key[1][2], bname, exc.remark,
                    self.locks.lease_ms)
        return False

    def _settle(self, key: LinkKey) -> bool:
        with self._lock:
            self._settled.add(key)
            self._unanswered_since.pop(key, None)
        return True
