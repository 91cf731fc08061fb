"""A transactional producer's sessions with the masters of its topics (the client side of ``ProducerSession``).

One stream per broker: a heartbeat at once and every ``heartbeat_interval_s`` (client id and producer group), and
the broker's check requests back. Each check runs the producer's ``transaction_checker`` in a small pool (a slow
checker holds up no stream) and answers COMMIT or ROLLBACK with EndTransaction(from_check=true) to the broker that
asked; UNKNOWN (or a checker that raises) answers nothing, so the broker asks again later.

The brokers are the masters of the topics the producer was given (``topics=``) or has sent half messages to,
looked up again every few seconds, and at once when a stream breaks (a restarted broker may be at a new address).
"""

import contextlib
import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from client.client_instance import ClientInstance
from client.errors import MQClientError
from client.push_consumer import new_client_id
from client.transaction import HalfMessage, TransactionChecker, TransactionResolution, end_transaction
from common.message_codec import CorruptRecordError, decode_record
from common.transaction_id import InvalidTransactionId, TransactionId
from proto import transaction_pb2, transaction_pb2_grpc

__all__ = ["ProducerSessions", "new_client_id"]

log = logging.getLogger(__name__)

REOPEN_PAUSE_S = 1.0
REFRESH_S = 5.0  # how often the brokers of the topics are looked up (in the route cache)
# Every this many lookups, the routes are asked of the name server: a session to a master that hung (its stream
# never breaks) moved to the group's new master only when the cached route expired, up to 30 s later, and the new
# master had stopped waiting for producers 15 s after its promotion (checks counted, and discarded, unsent).
FRESH_ROUTE_EVERY = 2
CHECK_THREADS = 4
_CLOSE = object()


class _BrokerSession:
    def __init__(self, sessions: "ProducerSessions", addr: str) -> None:
        self.addr = addr
        self._owner = sessions
        self._stub = sessions.client.stub(transaction_pb2_grpc.TransactionServiceStub, addr)
        self._signals: queue.Queue[object] = queue.Queue()
        self._closed = threading.Event()
        self._call: grpc.Future | None = None
        self._thread = threading.Thread(target=self._run, name=f"producer-session-{addr}", daemon=True)
        self._thread.start()

    def _frames(self, signals: "queue.Queue[object]") -> Iterator[transaction_pb2.ProducerHeartbeat]:
        while True:
            yield self._owner.heartbeat()
            try:
                if signals.get(timeout=self._owner.heartbeat_interval_s) is _CLOSE:
                    return
            except queue.Empty:
                pass

    def _run(self) -> None:
        while not self._closed.is_set():
            call = self._stub.ProducerSession(self._frames(self._signals))
            self._call = call
            try:
                for check in call:
                    self._owner.on_check(self.addr, check)
            except grpc.RpcError as exc:
                if self._closed.is_set():
                    return
                log.warning("producer_session_broken broker=%s status=%s detail=%s", self.addr, exc.code().name,
                            exc.details())
                self._owner.on_broken()
            if self._closed.wait(REOPEN_PAUSE_S):
                return
            self._signals.put(_CLOSE)  # ends the old stream's frames; the next stream reads a queue of its own
            self._signals = queue.Queue()

    def beat(self) -> None:
        """A heartbeat now (what it names changed), not at the next interval."""
        self._signals.put(None)

    def close(self) -> None:
        self._closed.set()
        self._signals.put(_CLOSE)
        self._thread.join(timeout=2)
        call = self._call
        if call is not None and self._thread.is_alive():
            call.cancel()


class ProducerSessions:
    def __init__(self, client: ClientInstance, group: str, client_id: str, checker: TransactionChecker,
                 topics: Iterable[str] = (), heartbeat_interval_s: float = 10.0, answer_timeout_s: float = 3.0) -> None:
        self.client = client
        self.group = group
        self.client_id = client_id
        self.checker = checker
        self.heartbeat_interval_s = heartbeat_interval_s
        self.answer_timeout_s = answer_timeout_s
        self._topics = set(topics)
        self._sessions: dict[str, _BrokerSession] = {}
        self._lock = threading.Lock()
        # One _keep at a time (the refresher's, add_topic's, set_topics'): one working from an older topic list or
        # older routes must not apply after a newer one, closing a session it just opened.
        self._keeping = threading.Lock()
        self._stale = threading.Event()  # look the brokers up afresh (a stream broke, a topic was added)
        if self._topics:
            self._stale.set()  # the topics given: sessions at once, before any half message is sent
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="transaction-check")
        self._refresher = threading.Thread(target=self._refresh_loop, name="producer-sessions", daemon=True)
        self._refresher.start()

    def heartbeat(self) -> transaction_pb2.ProducerHeartbeat:
        return transaction_pb2.ProducerHeartbeat(client_id=self.client_id, producer_groups=[self.group])

    def add_topic(self, topic: str) -> None:
        """A half message went to ``topic``: keep sessions with its brokers (opened now, before any check)."""
        with self._lock:
            if topic in self._topics:
                return
            self._topics.add(topic)
        self._keep(refresh=False)

    def set_topics(self, topics: Iterable[str]) -> None:
        """Keep sessions with the masters of exactly ``topics`` (those of no other topic close). Blocks (routes)."""
        with self._lock:
            self._topics = set(topics)
        self._keep(refresh=False)

    def heartbeat_now(self) -> None:
        """Every open session heartbeats now (what :meth:`heartbeat` names changed); new ones do at their start."""
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.beat()

    def on_broken(self) -> None:
        self._stale.set()

    # -- brokers -----------------------------------------------------------------------------------
    def _refresh_loop(self) -> None:
        rounds = 0
        while not self._closed.is_set():
            refresh = self._stale.wait(REFRESH_S)
            if self._closed.is_set():
                return
            self._stale.clear()
            rounds += 1
            try:
                self._keep(refresh or rounds % FRESH_ROUTE_EVERY == 0)
            except Exception:  # a name server that does not answer: the next round tries again
                log.exception("producer_sessions_refresh_failed")

    def _keep(self, refresh: bool) -> None:
        with self._keeping:
            gone = self._apply(self._masters(refresh))
        for session in gone:  # out of the lock: a stream's thread may take a while to end
            session.close()

    def _masters(self, refresh: bool) -> set[str]:
        """The master addresses of the topics now (routes looked up, afresh with ``refresh``)."""
        with self._lock:
            topics = sorted(self._topics)
        addrs: set[str] = set()
        for topic in topics:
            try:
                route = self.client.route(topic, refresh=refresh, for_publish=True)
            except MQClientError as exc:
                log.warning("producer_sessions_route_missing topic=%s error=%s", topic, exc)
                continue
            addrs.update(bd.broker_addrs[0] for bd in route.broker_datas if 0 in bd.broker_addrs)
        return addrs

    def _apply(self, addrs: set[str]) -> list[_BrokerSession]:
        """Sessions with exactly ``addrs`` opened; those with other brokers taken out, returned to be closed."""
        with self._lock:
            if self._closed.is_set():
                return []
            gone = [s for a, s in self._sessions.items() if a not in addrs]
            for session in gone:
                del self._sessions[session.addr]
            for addr in addrs - self._sessions.keys():
                self._sessions[addr] = _BrokerSession(self, addr)
        return gone

    # -- checks ------------------------------------------------------------------------------------
    def on_check(self, addr: str, check: transaction_pb2.TransactionCheckRequest) -> None:
        with contextlib.suppress(RuntimeError):  # closing
            self._pool.submit(self._answer, addr, check)

    def _answer(self, addr: str, check: transaction_pb2.TransactionCheckRequest) -> None:
        try:
            tx = TransactionId.decode(check.transaction_id)
            msg = decode_record(check.record)
        except (InvalidTransactionId, CorruptRecordError) as exc:
            log.error("transaction_check_unreadable broker=%s error=%s", addr, exc)
            return
        try:
            resolution = self.checker(msg)
        except Exception:
            log.exception("transaction_checker_failed tx=%s: answered nothing, the broker asks again", tx)
            return
        if not isinstance(resolution, TransactionResolution):
            log.error("transaction_checker_answer_invalid tx=%s answer=%r: a TransactionResolution is expected", tx,
                      resolution)
            return
        log.info("transaction_checked tx=%s check_times=%d resolution=%s", tx, check.check_times, resolution.value)
        if resolution is TransactionResolution.UNKNOWN:
            return
        half = HalfMessage(msg.topic, tx, check.msg_id)
        try:
            end_transaction(self.client, self.group, half, resolution, timeout_s=self.answer_timeout_s,
                            from_check=True, client_id=self.client_id, addr=addr)
        except MQClientError as exc:
            log.warning("transaction_check_answer_failed tx=%s error=%s", tx, exc)

    def close(self) -> None:
        self._closed.set()
        self._stale.set()
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._refresher.join(timeout=2)
