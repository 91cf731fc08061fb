"""KV store benchmarks (issue 6): a name server and one broker (``kvEnable=true``, RocksDB state, ASYNC_FLUSH,
default 1 GiB commitlog segments) as real processes, ``kvInit`` with 8 shards (all led by that broker),
1 KiB values.

Keys: ``KEYS`` of the mode (``bench-key-N``) are put before anything is measured, appended in-process to the
stopped broker's commitlog through its ``MessageStore`` - the records the broker writes for a put
(``KvRecord(...).encode()`` to the shard's queue of ``rmq_sys_KV``, ``body_limit=MAX_BODY_BYTES``), 64 a
batch, far faster than through the broker - and applied by the broker when it starts on it. So the gets find
every key, and the commitlog holds enough KV ops for the replay measurement.

Callers work like the echo's: one thread here keeps N calls in flight with futures (``windowed_rate``) on
the broker's ``KvService`` - the calls ``KVClient`` makes (a put: one write on its ``WriteStream``; a get:
one request on its ``GetStream``, LOGIC addressing and packed states), without its synchronous wrapper, which
cannot keep calls in flight from one thread.

- put / get, 16 callers: 16 calls in flight. Their ceiling is the same bare gRPC echo server
  (``bench/echo_server.py``, its own process) driven here with 16 unary calls in flight (the run's own echo
  is at ``--window``, 8, in flight), and, for puts, which go on a stream, its stream echo with 16 single 1 KiB
  requests in flight (the shape of a put and of a get); the echoes, put and get are measured in alternating
  rounds (the median of each), so drift on a shared machine hits all alike. The issue's targets compare a put
  and a get with the unary echo; the stream echo is shown beside them as the ceiling of the way they travel now.
  A put overwrites the next key in turn and is answered after the KV dispatcher applied it; a get reads one
  random key;
- batched get: a get of 64 random keys (over all 8 shards, all led by this broker; 4,096 such draws made before
  the clock starts and used in turn) a request, ``--window`` requests in flight like the run's stream echo;
  keys/s; then the same as unary ``Get`` calls (what other clients call), beside it;
- replay after a crash: the broker (its commitlog: the keys above, the measured puts) is SIGKILLed (the abort
  file stays), ``<storePathRootDir>/kv`` is removed (the whole commitlog must be replayed into RocksDB) and it
  is restarted. That recovery is abnormal: it CRC-checks the commitlog from its start, cuts it at its end
  (zeroing the rest of the last segment) and re-dispatches every record through the whole chain (consume
  queue, index, KV). Its time comes from the restarted broker's log: from ``kv_loaded`` (the empty RocksDB
  is open; logged just before recovery scans the commitlog) to ``store_recovered`` (every record
  dispatched; it says how many: ``replayed=N``). Rate = N / that time: all the recovery a crashed broker with
  N KV ops does before it serves; process start, imports, metadata load and name-server registration are
  left out (the note shows the time to the ready line beside the first start's, with an empty store). A
  sample of keys is read back afterwards to check the replay restored them. Below 200k replayed ops (smoke)
  the figure is shown but not judged (``SCALED``).
"""

import itertools
import random
import re
import shutil
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc

from bench.daemons import Daemon, start_broker, start_echo, start_namesrv, stop_all, wait_until
from bench.echo_bench import echo_on_stream, open_echo_stream
from bench.echo_server import METHOD
from bench.harness import BATCH, BODY, SCALED, Config, Metric, Pending, Recorder, Target, windowed_rate
from broker.broker_config import load_broker_config
from broker.kv.kv_record import MAX_BODY_BYTES, KvOp, KvRecord
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.message_store import MessageStore
from client import Admin, KVClient
from client.client_instance import ClientInstance
from client.kv_client import response_states
from common.kv_shard import KV_TOPIC, shard_of
from common.response_code import ResponseCode
from proto import broker_pb2, kv_pb2, kv_pb2_grpc

CALLERS = 16
SHARDS = 8
BROKER = "broker-kv"
ROUNDS = 3
KEY_BATCHES = 4096  # random 64-key gets drawn ahead, used in turn (their keys stay spread over every shard)
REPLAY_TARGET_OPS = 200_000
KEYS = {"smoke": 5_000, "quick": REPLAY_TARGET_OPS, "full": 2 * REPLAY_TARGET_OPS}
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
BROKER_SETTINGS: dict[str, Any] = dict(registerNameServerPeriod=1000, kvEnable="true", kvStoreType="rocksdb")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
REPLAYED = re.compile(r"store_recovered .*\breplayed=(\d+)")

METRICS = [
    Metric("kv.echo_unary16", "gRPC echo, unary 1 KiB, 16 in flight", "calls/s", echo="unary",
           short="echo unary @16", issue=6),
    Metric("kv.echo_stream16", "gRPC stream echo, 1 KiB requests, 16 in flight", "calls/s", echo="stream",
           short="echo stream @16", issue=6),
    Metric("kv.put", "KV put (acked after apply), 16 callers, on KVClient's stream", "ops/s", echo="unary",
           vs="kv.echo_stream16", target=Target(">=", 0.7, of="kv.echo_unary16"), issue=6),
    Metric("kv.get", "KV get, 16 callers, on KVClient's stream", "ops/s", echo="unary", vs="kv.echo_stream16",
           target=Target(">=", 0.7, of="kv.echo_unary16"), issue=6),
    Metric("kv.mget", "KV batched get, 64 keys a request", "keys/s", echo="stream", target=Target(">=", 100_000),
           issue=6),
    Metric("kv.mget_unary", "KV batched get, 64 keys a unary Get (other clients)", "keys/s", echo="batch",
           vs="kv.mget", issue=6, short="mget unary"),
    Metric("kv.replay", "KV replay after a crash", "ops/s", echo="batch", target=Target(">=", 200_000), issue=6),
]


def key(i: int) -> bytes:
    return b"bench-key-%08d" % i


class Loader:
    """KV calls on one broker's KvService as futures, for ``windowed_rate``."""

    def __init__(self, namesrv_addr: str, broker_addr: str, keys: list[bytes]) -> None:
        self.client = ClientInstance(namesrv_addr)  # KVClient's channel and streams, called without it
        self.writes = self.client.kv_write_stream(broker_addr)
        self.gets = self.client.kv_get_stream(broker_addr)
        self.stub = self.client.stub(kv_pb2_grpc.KvServiceStub, broker_addr)  # unary, as other clients call
        self.keys = keys
        self.turn = 0
        self.puts = 0  # acknowledged: each is a record in the commitlog
        self.rnd = random.Random(6)
        self._key_batches: dict[int, itertools.cycle[list[bytes]]] = {}  # drawn before the clock starts

    def close(self) -> None:
        self.client.close()

    def submit_put(self) -> Pending[kv_pb2.KvWriteResponse]:
        k = self.keys[self.turn % len(self.keys)]
        self.turn += 1
        return self.writes.call(kv_pb2.KvWriteRequest(op=kv_pb2.KV_PUT, key=k, value=BODY), 10)

    def put_done(self, response: kv_pb2.KvWriteResponse) -> int:
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"KV put failed: {response.code} {response.remark}")
        self.puts += 1
        return 1

    def submit_get(self, n: int, unary: bool = False) -> Callable[[], Pending[kv_pb2.KvGetResponse]]:
        batches = self._key_batches.get(n)
        if batches is None:  # drawing 64 random keys took a third of this process's time: the harness's, not the SDK's
            batches = self._key_batches[n] = itertools.cycle(
                [self.rnd.choices(self.keys, k=n) for _ in range(KEY_BATCHES)])

        def submit() -> Pending[kv_pb2.KvGetResponse]:
            keys = next(batches)
            request = kv_pb2.KvGetRequest(keys=keys, addressing=broker_pb2.LOGIC, pack_states=True)
            return self.stub.Get.future(request, timeout=10) if unary else self.gets.call(request, 10)

        return submit

    @staticmethod
    def get_done(response: kv_pb2.KvGetResponse) -> int:
        if response.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"KV get failed: {response.code} {response.remark}")
        states = response_states(response)
        if any(len(raw) != 1 + len(BODY) for raw in states):
            raise RuntimeError("KV get: a key put before is missing or has the wrong value")
        return len(states)


def fill_in_process(store_root: Path, conf_path: Path, keys: list[bytes]) -> None:
    """Append a put of each key (1 KiB value) to a stopped broker's commitlog, as that broker would write it."""
    conf = load_broker_config(conf_path.read_text(), {})
    mappings = TopicQueueMappingManager(store_root / "config", conf.broker_name)
    mappings.load()
    detail = mappings.get(KV_TOPIC)
    assert detail is not None, "kvInit left no rmq_sys_KV mapping on the broker"
    queue_of = detail.led_queues()  # shard -> physical queue id
    store = MessageStore(conf.store_config(f"{conf.broker_ip1}:0"))
    store.start()
    try:
        pending: dict[int, tuple[list[bytes], list[bytes]]] = {}
        for k in keys:
            props, body = KvRecord(KvOp.PUT, k, BODY).encode()
            shard = shard_of(k, detail.total_queues)
            bodies, all_props = pending.setdefault(shard, ([], []))
            bodies.append(body)
            all_props.append(props)
            if len(bodies) == BATCH:
                _append(store, queue_of[shard], pending.pop(shard))
        for shard, batch in pending.items():
            _append(store, queue_of[shard], batch)
    finally:
        store.shutdown()


def _append(store: MessageStore, queue_id: int, batch: tuple[list[bytes], list[bytes]]) -> None:
    result = store.put_messages(KV_TOPIC, queue_id, batch[0], batch[1], body_limit=MAX_BODY_BYTES,
                                wait_flushed=False)
    if not result.ok:
        raise RuntimeError(f"in-process KV append failed: {result.error}")


def _alternate(measures: list[Callable[[float, float], float]], cfg: Config) -> list[float]:
    """Each measure ``ROUNDS`` times, interleaved, ``seconds / ROUNDS`` each (warm-up in the first round)."""
    rates: list[list[float]] = [[] for _ in measures]
    for r in range(ROUNDS):
        for i, measure in enumerate(measures):
            rates[i].append(measure(cfg.seconds / ROUNDS, cfg.warmup if r == 0 else 0.0))
    return [statistics.median(r) for r in rates]


def _alternate_callers(loader: Loader, echo_channel: grpc.Channel, cfg: Config) -> list[float]:
    """Unary echo, stream echo, put and get rates with ``CALLERS`` calls in flight, in alternating rounds."""
    echo_call = echo_channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    echo_stream = open_echo_stream(echo_channel, CALLERS)
    try:
        return _alternate([
            lambda s, w: windowed_rate(lambda: echo_call.future(BODY, timeout=10), lambda r: 1, CALLERS, s, w),
            lambda s, w: windowed_rate(lambda: echo_on_stream(echo_stream, BODY), lambda r: 1, CALLERS, s, w),
            lambda s, w: windowed_rate(loader.submit_put, loader.put_done, CALLERS, s, w),
            lambda s, w: windowed_rate(loader.submit_get(1), loader.get_done, CALLERS, s, w),
        ], cfg)
    finally:
        echo_stream.close()


def _log_time(line: str) -> float | None:
    m = LOG_TIME.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def replay_from_log(text: str) -> tuple[int, float]:
    """(records replayed, seconds from ``kv_loaded`` to ``store_recovered``) in one broker start's log."""
    loaded = recovered = None
    replayed = -1
    for line in text.splitlines():
        if " kv_loaded " in line and loaded is None:
            loaded = _log_time(line)
        m = REPLAYED.search(line)
        if m:
            recovered, replayed = _log_time(line), int(m.group(1))
    if loaded is None or recovered is None:
        raise RuntimeError(f"no kv_loaded / store_recovered lines in the restarted broker's log:\n{text[-3000:]}")
    return replayed, recovered - loaded


def _start(workdir: Path, ns_addr: str) -> tuple[Daemon, float]:
    """The broker on its store (the same each time), and how long it took to be ready."""
    t0 = time.perf_counter()
    broker = start_broker(workdir, BROKER, ns_addr, **BROKER_SETTINGS)
    return broker, time.perf_counter() - t0


def _shards(kv: KVClient) -> int:
    try:
        return kv.shards(refresh=True)
    except Exception:
        return 0


def _check_restored(addr: str, keys: list[bytes]) -> None:
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        stub = kv_pb2_grpc.KvServiceStub(channel)
        Loader.get_done(stub.Get(kv_pb2.KvGetRequest(keys=keys, addressing=broker_pb2.LOGIC), timeout=30))


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "kv"
    store_root = workdir / BROKER / "store"
    keys = [key(i) for i in range(KEYS[cfg.mode])]
    echo = start_echo(workdir)
    ns = start_namesrv(workdir)
    daemons = [echo, ns]
    loader: Loader | None = None
    echo_channel = grpc.insecure_channel(echo.addr, options=CHANNEL_OPTIONS)
    try:
        broker, empty_ready_s = _start(workdir, ns.addr)
        daemons.insert(0, broker)
        with Admin(ns.addr) as admin:
            admin.kv_init(SHARDS, cluster="DefaultCluster")
        with KVClient(ns.addr) as kv:  # through the SDK once: the store is set up as a client sees it
            wait_until(lambda: _shards(kv) == SHARDS, what="the KV route")
            kv.put(b"bench-hello", b"world")
            assert kv.get(b"bench-hello") == b"world"
        broker.stop()
        daemons.remove(broker)
        fill_in_process(store_root, workdir / BROKER / "broker.conf", keys)
        broker, _ = _start(workdir, ns.addr)  # applies them
        daemons.insert(0, broker)

        loader = Loader(ns.addr, broker.addr, keys)
        echo16, stream16, put, get = _alternate_callers(loader, echo_channel, cfg)
        rec.record("kv.echo_unary16", echo16, f"median of {ROUNDS} rounds, alternating with put and get")
        rec.record("kv.echo_stream16", stream16, f"median of {ROUNDS} rounds")
        rec.record("kv.put", put, f"{len(keys):,} keys, median of {ROUNDS}")
        rec.record("kv.get", get, f"median of {ROUNDS}")
        mget = windowed_rate(loader.submit_get(BATCH), loader.get_done, cfg.window, cfg.seconds, cfg.warmup)
        rec.record("kv.mget", mget, f"{cfg.window} in flight")
        mget_unary = windowed_rate(loader.submit_get(BATCH, unary=True), loader.get_done, cfg.window, cfg.seconds,
                                   cfg.warmup)
        rec.record("kv.mget_unary", mget_unary, f"{cfg.window} in flight")
        written = len(keys) + loader.puts + 1  # and bench-hello
        loader.close()
        loader = None

        broker.kill()  # SIGKILL: the abort file stays, the next start recovers as after a crash
        daemons.remove(broker)
        shutil.rmtree(store_root / "kv")
        log_from = broker.log_path.stat().st_size
        broker, ready_s = _start(workdir, ns.addr)
        daemons.insert(0, broker)
        with broker.log_path.open(errors="replace") as f:
            f.seek(log_from)
            replayed, replay_s = replay_from_log(f.read())
        if replayed < written:
            raise RuntimeError(f"replayed {replayed:,} records, but {written:,} KV ops were written")
        _check_restored(broker.addr, random.Random(1).sample(keys, 256))
        rec.record("kv.replay", replayed / replay_s,
                   f"{replayed:,} ops in {replay_s:.2f} s; ready {ready_s:.1f} s vs {empty_ready_s:.1f} s empty")
        if replayed < REPLAY_TARGET_OPS:
            rec.status["kv.replay"] = SCALED
    finally:
        if loader is not None:
            loader.close()
        echo_channel.close()
        stop_all(daemons)


if __name__ == "__main__":
    import sys

    from bench.runner import main

    raise SystemExit(main(["--only", "kv", *sys.argv[1:]]))
