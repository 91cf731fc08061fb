"""Failover under load (issue 16, controller mode): a name server running the controller, broker group broker-a of
two replicas (every send waits for the in-sync set), a plain broker broker-b beside it, a topic on both and the
KV store on both; the SDK here.

While a producer sends (keyed and plain messages, one at a time), a push consumer group consumes and a KV writer
puts, the master of broker-a is SIGKILLed ``CYCLES`` times, each time once it has acknowledged ``BUSY_SENDS`` sends
since the last (the SDK keeps off a group for a while after a failure: the kill must hit a busy master). Each cycle
measures the failover: from the SIGKILL to the first send the new master acknowledges
(a raw SendMessage to the surviving replica, retried every ``PROBE_PAUSE_S``), then restarts the killed replica on
its own store and conf and waits until the master lists it in its ``syncStateSet`` again (so every cycle kills an
in-sync master). At the end the writers stop, the consumer drains, and every acknowledged message must have been
received and every acknowledged KV put must read back.

Reported in absolute seconds: dividing a failover by the echo round trip means nothing (it is the controller
noticing the loss and an election, not a call), so these rows have no *x echo*. Target: p50 <= 5 s. A SIGKILLed
process's sockets are closed by the kernel, so the controller sees the master's session end and elects at once: this
measures that path. A master that goes silent without closing them (a frozen process, a lost host) is only noticed
after ``controllerHeartBeatTimeoutMills`` (3000 here, upstream's default 10 s), which is not what is measured here.

The SDK fails over by itself (sends move to broker-b or the new master, reads fall back to a slave); what it still
surfaces to the application is retried here as an application would (the same message again, the same KV put
again) and counted. A retried send that had in fact been stored is received twice: duplicates are counted, not
judged (delivery is at least once). Smoke mode does not run this scenario: the group's start and ten
kill-restart-rejoin cycles take about half a minute.

The load, the failover cycle and the accounting are used by ``tests/ha/test_failover_soak.py`` too, with its own
replica group (anything with ``ns``, ``replicas``, ``start`` and ``info`` will do: :class:`ReplicaGroupLike`).
"""

import contextlib
import itertools
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

import grpc

from bench.daemons import Daemon, start_broker, wait_until
from bench.harness import Config, Metric, Recorder, Target, percentile
from client import Admin, KVClient, Message, MessageExt, Producer, PushConsumer
from cluster.daemon_process import start_namesrv
from common.kv_shard import KV_TOPIC
from common.response_code import ResponseCode
from proto import broker_pb2, broker_pb2_grpc, common_pb2

TOPIC = "BenchFailover"
QUEUES = 4
GROUP = "bench-failover"
CYCLES = {"smoke": 0, "quick": 10, "full": 10}
SEGMENT = 64 * 1024 * 1024
KEYS = 16  # sharding keys of the keyed messages: some on each broker's queues
KV_KEYS = 256  # the writer cycles over these keys, so later puts overwrite earlier ones: the last one must win
BODY_PAD = b"." * 100
PROBE_PAUSE_S = 0.01  # between probe sends: the resolution of the failover time; a probe costs little
RETRY_PAUSE_S = 0.05  # before a writer retries what failed: a tight loop would only add load to a failing group
BUSY_SENDS = 20  # acknowledged by broker-a since the last cycle before its master is killed
FAILOVER_DEADLINE_S = 30.0
REJOIN_DEADLINE_S = 60.0
DRAIN_DEADLINE_S = 60.0
WRITER_DEADLINE_S = 60.0  # once stopping, how long a writer may still retry what it has in hand

# Replicas of broker-a, as tests/ha/test_controller_failover.py's group: short timeouts, so that routes follow a
# failover within a second or so and a silent master would be replaced within seconds.
REPLICA_SETTINGS: dict[str, object] = {
    "mappedFileSizeCommitLog": SEGMENT,
    "registerNameServerPeriod": 1000,  # the name server hears of the new master within a second
    "brokerNotActiveTimeoutMillis": 3000,  # and drops a dead one from routes after 3 s
    "slaveReadEnable": "true",  # consumers read from the slave while broker-a has no master
    "enableControllerMode": "true",
    "controllerHeartBeatTimeoutMills": 3000,  # a silent master (not a killed one) is gone after 3 s, not 10
    "haMaxTimeSlaveNotCatchup": 15000,
    "syncFlushTimeout": 1000,  # a send whose in-sync replica died answers within 1 s instead of 5
    "kvEnable": "true",
}
PLAIN_SETTINGS: dict[str, object] = {"registerNameServerPeriod": 1000, "kvEnable": "true"}

T = TypeVar("T")
NONE = Target("<=", 0, text="0")
METRICS = [
    Metric("failover.p50", "failover, SIGKILL to 1st send acked by new master, p50", "s", issue=16,
           target=Target("<=", 5)),
    Metric("failover.p90", "failover, p90", "s", issue=16),
    Metric("failover.max", "failover, max", "s", issue=16),
    Metric("failover.rejoin_p50", "restarted old master back in sync, p50", "s", issue=16),
    Metric("failover.lost", "acknowledged messages never received", "msgs", issue=16, target=NONE),
    Metric("failover.duplicates", "messages received more than once", "msgs", issue=16),
    Metric("failover.kv_lost", "acknowledged KV puts not read back", "puts", issue=16, target=NONE),
    Metric("failover.send_retries", "send errors the producer app retried", "sends", issue=16),
    Metric("failover.kv_retries", "KV put errors the writer app retried", "puts", issue=16),
    Metric("failover.send_slowest", "slowest acked send, SDK + app retries", "s", issue=16),
    Metric("failover.kv_slowest", "slowest acked KV put, SDK + app retries", "s", issue=16),
]


class ReplicaGroupLike(Protocol):
    """What the soak needs of a replica group (``tests/ha/test_controller_failover.py``'s ``ReplicaGroup`` too)."""

    ns: Daemon
    replicas: dict[int, Daemon]

    def start(self, broker_id: int) -> Daemon: ...

    def info(self, broker_id: int) -> dict[str, str] | None: ...


def runtime_or_none(ns_addr: str, broker: Daemon) -> dict[str, str] | None:
    try:
        with Admin(ns_addr) as admin:
            return admin.broker_runtime_info(broker.addr)
    except Exception:  # a replica restarting, or just killed: not answering for a moment
        return None


class BenchReplicaGroup:
    """The bench's own group (the benchmarks use nothing from the test tree): a controller name server, broker-a
    of ``replicas`` replicas (replica 1 elected first), broker-b a plain broker."""

    def __init__(self, workdir: Path, replicas: int = 2) -> None:
        self.workdir = workdir
        self.ns = start_namesrv(workdir / "namesrv", "--enable-controller", "--controller-store-path",
                                str(workdir / "controller"))
        self.settings = {**REPLICA_SETTINGS, "controllerAddr": self.ns.addr}
        self.replicas: dict[int, Daemon] = {}
        self.plain: Daemon | None = None
        try:
            self._start_all(replicas)
        except BaseException:  # the caller gets no group to stop: stop what started
            self.stop()
            raise

    def _start_all(self, replicas: int) -> None:
        self.start(1)
        # Replica 1 first and alone: it is elected, so the cycles start from a known master.
        wait_until(lambda: role(self, 1) == "MASTER", timeout=15, what="replica 1 to be elected master")
        for broker_id in range(2, replicas + 1):
            self.start(broker_id)
        self.plain = start_broker(self.workdir / "plain", "broker-b", self.ns.addr, None, **PLAIN_SETTINGS)

    def start(self, broker_id: int) -> Daemon:
        self.replicas[broker_id] = start_broker(self.workdir / f"r{broker_id}", "broker-a", self.ns.addr, None,
                                                brokerId=broker_id, **self.settings)
        return self.replicas[broker_id]

    def info(self, broker_id: int) -> dict[str, str] | None:
        return runtime_or_none(self.ns.addr, self.replicas[broker_id])

    def stop(self) -> None:
        for d in [*self.replicas.values(), *([self.plain] if self.plain else []), self.ns]:
            if d.alive:
                d.stop(strict=False)


# -- the group's state, from the replicas' runtime info ----------------------------------------------------
def role(g: ReplicaGroupLike, broker_id: int) -> str:
    info = g.info(broker_id)
    return info.get("replicaRole", "") if info else ""


def members(broker_ids: list[int]) -> str:
    """How the runtime info's ``syncStateSet`` lists these replicas."""
    return ",".join(str(i) for i in sorted(broker_ids))


def in_sync(g: ReplicaGroupLike, master: int) -> bool:
    """``master`` is the master and every replica of the group is in its in-sync set."""
    info = g.info(master)
    return info is not None and info.get("replicaRole") == "MASTER" and info.get("syncStateSet") == members(
        list(g.replicas))


def current_master(g: ReplicaGroupLike) -> int:
    return wait_until(lambda: next((i for i in g.replicas if role(g, i) == "MASTER"), 0), timeout=15,
                      what="broker-a to have a master")


def _stub(addr: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerServiceStub]:
    channel = grpc.insecure_channel(addr)
    return channel, broker_pb2_grpc.BrokerServiceStub(channel)


def knows_topics(addr: str, topic: str) -> bool:
    """The broker has ``topic`` and the KV store's static mapping: what a promoted slave must already hold
    (it copies them from its master every few seconds)."""
    channel, stub = _stub(addr)
    with channel:
        configs = stub.GetAllTopicConfig(common_pb2.Empty(), timeout=5).configs
        details = stub.GetAllTopicQueueMapping(common_pb2.Empty(), timeout=5).details
    return topic in {c.topic_name for c in configs} and KV_TOPIC in {d.topic for d in details}


def prepare(g: ReplicaGroupLike, topic: str = TOPIC, queues: int = QUEUES) -> None:
    """Every replica in sync, the topic on broker-a and broker-b, the KV store provisioned, and every slave
    holding both: the first kill must find a replica able to take over everything."""
    master = current_master(g)
    wait_until(lambda: in_sync(g, master), timeout=30, what="every replica in the in-sync set")
    with Admin(g.ns.addr) as admin:
        admin.create_topic(topic, brokers=["broker-a", "broker-b"], read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: {q.broker_name for q in admin.topic_route(topic).queue_datas} >= {"broker-a", "broker-b"}
                   if topic in admin.topic_list() else False, what=f"route of {topic}")
    with KVClient(g.ns.addr) as kv:
        kv.put(b"provision", b"x")  # the first use creates the shards, on broker-a and broker-b
    for broker_id, daemon in g.replicas.items():
        if broker_id != master:
            wait_until(partial(knows_topics, daemon.addr, topic), timeout=30,
                       what=f"replica {broker_id} to copy {topic} and the KV mapping")


# -- the live load ----------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What the load saw, once the writers stopped and the consumer drained."""

    acked: int
    received: int
    lost: int  # acknowledged, never received
    duplicates: int  # deliveries beyond the first of a message
    unacked_received: int  # stored although its send failed (a lost answer, a timed-out in-sync ack): allowed
    kv_acked: int  # keys whose last put was acknowledged
    kv_lost: int  # of those, keys that do not read back their last acknowledged value
    kv_puts: int  # puts acknowledged
    send_retries: int
    kv_retries: int
    send_slowest_s: float  # the longest an acknowledged send took, its retries included: what an app waited
    kv_slowest_s: float
    errors: Counter[str] = field(default_factory=Counter)  # what the SDK raised, by type and a short reason
    lost_sample: list[bytes] = field(default_factory=list)
    kv_lost_sample: list[tuple[bytes, bytes, bytes | None]] = field(default_factory=list)


def error_kind(exc: BaseException) -> str:
    """A short label for an error: its type and the start of its message (addresses and offsets vary)."""
    text = str(exc).split("\n", 1)[0]
    return f"{type(exc).__name__}: {text[:80]}"


class _Aborted(Exception):
    """Raised in a writer thread by :meth:`LiveLoad.abort`."""


@contextlib.contextmanager
def _aborting() -> Iterator[None]:
    """A writer thread ends quietly when aborted."""
    with contextlib.suppress(_Aborted):
        yield


class LiveLoad:
    """A producer thread, a KV writer thread and a push consumer group, running until :meth:`finish`. An error
    the SDK surfaces is retried with the same message (the same put) after a short pause, as an application
    would, and counted; the load never stops on one."""

    def __init__(self, ns_addr: str, topic: str = TOPIC, group: str = GROUP) -> None:
        self.ns_addr = ns_addr
        self.topic = topic
        self._lock = threading.Lock()
        self._stop = threading.Event()  # finish what is in hand, then stop
        self._abort = threading.Event()  # stop now, even in the middle of retrying
        self.acked: list[bytes] = []
        self.acked_on: Counter[str] = Counter()  # by broker name
        self.received: Counter[bytes] = Counter()
        self.kv_acked: dict[bytes, bytes] = {}
        self.kv_puts = 0
        self.retries: Counter[str] = Counter()  # by what: "send", "kv put"
        self.slowest: dict[str, float] = {"send": 0.0, "kv put": 0.0}
        self.errors: Counter[str] = Counter()
        self.consumer = PushConsumer(ns_addr, group=group, topic=topic, handler=self._on_message,
                                     consume_from_first=True)
        self._threads = [threading.Thread(target=self._produce, name="failover-producer", daemon=True),
                         threading.Thread(target=self._put, name="failover-kv-writer", daemon=True)]

    def start(self) -> "LiveLoad":
        self.consumer.start()
        for t in self._threads:
            t.start()
        return self

    def _on_message(self, msg: MessageExt) -> None:
        with self._lock:
            self.received[msg.body] += 1

    def acknowledge(self, body: bytes, broker_name: str) -> None:
        """A message acknowledged: by the producer thread, or the failover probe."""
        with self._lock:
            self.acked.append(body)
            self.acked_on[broker_name] += 1

    def wait_for_sends(self, broker_name: str, count: int, timeout_s: float) -> None:
        """Until ``count`` more messages are acknowledged by ``broker_name``: after a failover the SDK keeps off a
        group for a few seconds, and a kill should hit a master that is taking sends, not an idle one."""
        with self._lock:
            target = self.acked_on[broker_name] + count

        def reached() -> bool:
            with self._lock:
                return self.acked_on[broker_name] >= target

        wait_until(reached, timeout=timeout_s, interval=0.05, what=f"{count} sends acknowledged by {broker_name}")

    def _until_acknowledged(self, what: str, call: Callable[[], T]) -> T:
        """``call`` until it succeeds, counting each failure; only :meth:`abort` ends it early. Even once stopping,
        what is in hand is retried: given up, a put's outcome would be unknown and its key uncheckable."""
        started = time.monotonic()
        while True:
            try:
                result = call()
                took = time.monotonic() - started
                with self._lock:
                    self.slowest[what] = max(self.slowest[what], took)
                return result
            except Exception as exc:  # whatever the SDK raises: an application retries, it does not crash
                with self._lock:
                    self.errors[f"{what}: {error_kind(exc)}"] += 1
                    self.retries[what] += 1
            if self._abort.wait(RETRY_PAUSE_S):  # a tight loop would only add load to a failing group
                raise _Aborted

    def _produce(self) -> None:
        with Producer(self.ns_addr) as producer, _aborting():
            seq = 0
            while not self._stop.is_set():
                body = b"m-%09d-" % seq + BODY_PAD
                # Every other message keyed: a key fixes its queue, which the SDK cannot move to another group, so
                # a failover of that queue's group reaches the application; the plain ones the SDK moves itself.
                key = f"order-{seq % KEYS}" if seq % 2 else None
                # The same body again: one stored by a failed try is then received twice, a duplicate.
                result = self._until_acknowledged(
                    "send", lambda: producer.send(Message(self.topic, body), sharding_key=key))  # noqa: B023
                self.acknowledge(body, result.queue.broker_name)
                seq += 1

    def _put(self) -> None:
        with KVClient(self.ns_addr) as kv, _aborting():
            seq = 0
            while not self._stop.is_set():
                key, value = b"key-%04d" % (seq % KV_KEYS), b"value-%09d" % seq
                # The same put again: a later put of this key must not overtake one whose outcome is unknown.
                self._until_acknowledged("kv put", lambda: kv.put(key, value))  # noqa: B023
                with self._lock:
                    self.kv_acked[key] = value
                    self.kv_puts += 1
                seq += 1

    def counts(self) -> tuple[int, int, int]:
        """(messages acknowledged, messages received, KV puts acknowledged) so far."""
        with self._lock:
            return len(self.acked), sum(self.received.values()), self.kv_puts

    def finish(self, drain_s: float = DRAIN_DEADLINE_S) -> Outcome:
        """Stop the writers (each finishes the send or put in hand, retrying until it is acknowledged), wait until
        every acknowledged message arrived (or ``drain_s`` passed), close the consumer and read every key back."""
        self._stop.set()
        for t in self._threads:
            t.join(WRITER_DEADLINE_S)
            if t.is_alive():
                self.abort()
                raise RuntimeError(f"{t.name} still retrying {WRITER_DEADLINE_S} s after the load stopped: "
                                   f"{self.errors.most_common(3)}")
        with contextlib.suppress(TimeoutError):  # what never arrived is reported as lost
            wait_until(self._drained, timeout=drain_s, interval=0.1, what="the consumer to receive every message")
        self.consumer.close()
        return self._outcome(self._kv_mismatches())

    def abort(self) -> None:
        """Stop everything at once, nothing checked (a failed run)."""
        self._stop.set()
        self._abort.set()
        for t in self._threads:
            t.join(5)
        self.consumer.close()

    def _drained(self) -> bool:
        with self._lock:
            return all(body in self.received for body in self.acked)

    def _kv_mismatches(self) -> list[tuple[bytes, bytes, bytes | None]]:
        keys = sorted(self.kv_acked)
        with KVClient(self.ns_addr) as kv:
            got = kv.get_batch(keys)
        return [(k, self.kv_acked[k], v) for k, v in zip(keys, got, strict=True) if v != self.kv_acked[k]]

    def _outcome(self, kv_mismatches: list[tuple[bytes, bytes, bytes | None]]) -> Outcome:
        with self._lock:
            acked = set(self.acked)
            lost = sorted(acked - set(self.received))
            return Outcome(
                acked=len(self.acked), received=sum(self.received.values()), lost=len(lost),
                duplicates=sum(n - 1 for n in self.received.values()),
                unacked_received=len(set(self.received) - acked), kv_acked=len(self.kv_acked),
                kv_lost=len(kv_mismatches), kv_puts=self.kv_puts, send_retries=self.retries["send"],
                kv_retries=self.retries["kv put"], send_slowest_s=self.slowest["send"],
                kv_slowest_s=self.slowest["kv put"], errors=Counter(self.errors), lost_sample=lost[:5],
                kv_lost_sample=kv_mismatches[:5])


# -- one failover ---------------------------------------------------------------------------------------------
@dataclass
class Cycle:
    killed: int
    new_master: int
    failover_s: float  # SIGKILL to the first send the new master acknowledged
    rejoin_s: float  # restart of the killed replica to it being back in the in-sync set
    probes: int  # sends tried until one was acknowledged


def first_acknowledged_send(addr: str, topic: str, tag: str, deadline_s: float) -> tuple[bytes, int]:
    """Send one message at a time to ``addr`` (queue 0 of ``topic``) until one is acknowledged: its body and how
    many were tried. Each try has its own body: one refused but stored anyway is not taken for the acked one."""
    channel, stub = _stub(addr)
    deadline = time.monotonic() + deadline_s
    with channel:
        for attempt in itertools.count():
            body = f"probe-{tag}-{attempt}".encode()
            try:
                answer = stub.SendMessage(broker_pb2.SendMessageRequest(topic=topic, queue_id=0, bodies=[body]),
                                          timeout=1.0)
                if answer.code == ResponseCode.SUCCESS:
                    return body, attempt + 1
            except grpc.RpcError:
                pass  # not answering (yet): try again
            if time.monotonic() > deadline:
                break
            time.sleep(PROBE_PAUSE_S)
    raise TimeoutError(f"no send acknowledged by {addr} within {deadline_s} s")


def failover_cycle(g: ReplicaGroupLike, load: LiveLoad, n: int,
                   after_rejoin: Callable[[int, int], None] | None = None) -> Cycle:
    """SIGKILL broker-a's master, time the first acknowledged send to its successor, restart the killed replica
    and wait until it is in sync again. ``after_rejoin(old master, new master)`` runs once it is."""
    load.wait_for_sends("broker-a", BUSY_SENDS, timeout_s=REJOIN_DEADLINE_S)
    killed = current_master(g)
    survivors = [i for i in g.replicas if i != killed]
    assert len(survivors) == 1, "the probe knows its target only with two replicas"
    successor = survivors[0]
    started = time.monotonic()
    g.replicas[killed].kill()
    body, probes = first_acknowledged_send(g.replicas[successor].addr, load.topic, str(n), FAILOVER_DEADLINE_S)
    failover_s = time.monotonic() - started
    load.acknowledge(body, "broker-a")

    restarted = time.monotonic()
    g.start(killed)  # the same store and conf: it rejoins as a replica, cutting what the new master never had
    wait_until(lambda: in_sync(g, successor), timeout=REJOIN_DEADLINE_S, interval=0.1,
               what=f"replica {killed} back in the in-sync set of {successor}")
    rejoin_s = time.monotonic() - restarted
    if after_rejoin is not None:
        after_rejoin(killed, successor)
    return Cycle(killed, successor, failover_s, rejoin_s, probes)


# -- the scenario ---------------------------------------------------------------------------------------------
def _log(msg: str) -> None:
    print(f"[failover] {msg}", file=sys.stderr, flush=True)


def record(rec: Recorder, cycles: list[Cycle], outcome: Outcome) -> None:
    failovers = [c.failover_s for c in cycles]
    note = f"{len(cycles)} SIGKILLs; absolute seconds (x echo: n/a)"
    rec.record("failover.p50", percentile(failovers, 50), note)
    rec.record("failover.p90", percentile(failovers, 90), note)
    rec.record("failover.max", max(failovers), "each: " + " ".join(f"{s:.2f}" for s in failovers))
    rec.record("failover.rejoin_p50", percentile([c.rejoin_s for c in cycles], 50), "restart + catch-up")
    rec.record("failover.lost", outcome.lost, f"of {outcome.acked:,} acked, {outcome.received:,} received"
               + (f"; e.g. {outcome.lost_sample[:2]}" if outcome.lost else ""))
    rec.record("failover.duplicates", outcome.duplicates, f"{outcome.unacked_received} unacked sends delivered")
    rec.record("failover.kv_lost", outcome.kv_lost, f"{outcome.kv_acked} keys, {outcome.kv_puts:,} puts acked"
               + (f"; e.g. {outcome.kv_lost_sample[:2]}" if outcome.kv_lost else ""))
    rec.record("failover.send_retries", outcome.send_retries, _top_errors(outcome.errors, "send"))
    rec.record("failover.kv_retries", outcome.kv_retries, _top_errors(outcome.errors, "kv put"))
    rec.record("failover.send_slowest", outcome.send_slowest_s, "what the producer app waited at worst")
    rec.record("failover.kv_slowest", outcome.kv_slowest_s, "what the KV writer app waited at worst")


def _top_errors(errors: Counter[str], what: str) -> str:
    mine = [(k.removeprefix(f"{what}: "), n) for k, n in errors.most_common() if k.startswith(f"{what}: ")]
    return "; ".join(f"{n}x {k}" for k, n in mine[:2])


def soak(g: ReplicaGroupLike, cycles: int, after_rejoin: Callable[[int, int], None] | None = None,
         log: Callable[[str], None] = _log) -> tuple[list[Cycle], Outcome]:
    """The live load through ``cycles`` failovers of a prepared group; what each cycle measured and what the load
    saw once drained."""
    load = LiveLoad(g.ns.addr).start()
    done: list[Cycle] = []
    try:
        wait_until(lambda: min(load.counts()) > 0, timeout=30, what="the load to be acknowledged and received")
        for n in range(cycles):
            c = failover_cycle(g, load, n, after_rejoin)
            done.append(c)
            acked, received, puts = load.counts()
            log(f"cycle {n + 1}/{cycles}: killed {c.killed}, {c.new_master} acked after {c.failover_s:.2f} s "
                f"({c.probes} probes), {c.killed} in sync {c.rejoin_s:.2f} s after its restart; so far {acked:,} "
                f"acked, {received:,} received, {puts:,} puts acked, {load.retries['send']} send + "
                f"{load.retries['kv put']} put retries")
    except BaseException:
        load.abort()
        raise
    return done, load.finish()


def scenario(cfg: Config, rec: Recorder) -> None:
    cycles = CYCLES[cfg.mode]
    if not cycles:
        for m in METRICS:
            rec.skip(m.id, "10 kill-restart-rejoin cycles take ~30 s: quick and full mode only")
        return
    g = BenchReplicaGroup(cfg.workdir / "failover")
    try:
        prepare(g)
        done, outcome = soak(g, cycles)
        record(rec, done, outcome)
        if outcome.errors:
            _log("errors retried: " + "; ".join(f"{n}x {k}" for k, n in outcome.errors.most_common(6)))
    finally:
        g.stop()
