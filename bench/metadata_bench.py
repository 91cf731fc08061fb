"""Metadata at scale: broker restart-to-ready time and RSS with 1,000,000 topics in RocksDB mode, and the cost
of updating one topic at 1k vs 1M topics (RocksDB) and at 100k topics (JSON).

``python -m bench.metadata_bench [--topics 1000000] [--json-topics 100000] [--no-namesrv]``

The topics are created in-process through the TopicConfigManager (batches of 10,000, one WriteBatch each),
the store is closed, then a real broker daemon is started on it: "ready" is the daemon's ready line (after
loading the metadata and, with a name server, its first full registration). Prints one table."""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from broker.metadata.metadata_store import open_metadata_stores
from broker.metadata.topic_config_manager import TopicConfigManager
from broker.store.config import StoreType
from common.topic_config import TopicConfig

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+:\d+)")
BATCH = 10_000
ROCKSDB, JSON = StoreType.DEFAULT_ROCKSDB, StoreType.DEFAULT


def create_topics(store_type: StoreType, root: Path, count: int) -> float:
    """``count`` topics through the manager; returns seconds."""
    stores = open_metadata_stores(store_type, root)
    try:
        manager = TopicConfigManager(stores.topics)
        started = time.perf_counter()
        if store_type is StoreType.DEFAULT:  # one whole-file write, not one per batch: this is only the set-up
            manager.topic_config_table.update((f"T{i:07d}", TopicConfig(f"T{i:07d}", 8, 8)) for i in range(count))
            manager.update(TopicConfig("T0000000", 8, 8))
        else:
            for start in range(0, count, BATCH):
                manager.update_many([TopicConfig(f"T{i:07d}", 8, 8) for i in range(start, min(count, start + BATCH))])
        return time.perf_counter() - started
    finally:
        stores.close()


def update_cost(store_type: StoreType, root: Path, runs: int) -> tuple[float, float, float]:
    """Load the store, then time ``runs`` single-topic updates: (load seconds, median ms, p99 ms)."""
    stores = open_metadata_stores(store_type, root)
    try:
        manager = TopicConfigManager(stores.topics)
        started = time.perf_counter()
        manager.load()
        load_s = time.perf_counter() - started
        times = []
        for i in range(runs):
            config = TopicConfig(f"T{(i * 7919) % len(manager.topic_config_table):07d}", 4 + i % 2, 4 + i % 2)
            t = time.perf_counter()
            manager.update(config)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        return load_s, statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]
    finally:
        stores.close()


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def spawn(module: str, args: list[str], log: Path) -> tuple[subprocess.Popen, str, float]:
    """Start ``python -m module``; return it, its address and the seconds until its ready line."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=log.open("ab"), text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    ready: list[str] = []
    got = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = READY.search(line)
            if m and not ready:
                ready.append(m.group(1))
                got.set()
        got.set()

    threading.Thread(target=drain, daemon=True).start()
    if not got.wait(300) or not ready:
        proc.kill()
        raise RuntimeError(f"{module} not ready:\n{log.read_text()[-2000:]}")
    return proc, ready[0], time.perf_counter() - started


def broker_restart(root: Path, namesrv_addr: str) -> tuple[float, float, float]:
    """Start a broker on ``root`` (RocksDB metadata); (seconds to ready, RSS MiB, peak RSS MiB)."""
    conf = root / "broker.conf"
    conf.write_text(f"brokerName=bench-broker\nlistenPort=0\nbrokerIP1=127.0.0.1\nstorePathRootDir={root}\n"
                    f"storeType=defaultRocksDB\nnamesrvAddr={namesrv_addr}\nmappedFileSizeCommitLog=67108864\n")
    proc, _, ready_s = spawn("broker.main", ["-c", str(conf)], root / "broker.log")
    try:
        time.sleep(0.5)
        rss, peak = rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(120)
    return ready_s, rss, peak


def timed(label: str, call: Callable[[], T]) -> T:
    print(f"  {label} ...", file=sys.stderr, flush=True)
    return call()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--small-topics", type=int, default=1_000)
    parser.add_argument("--json-topics", type=int, default=100_000)
    parser.add_argument("--no-namesrv", action="store_true", help="skip the restart with a name server")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir, removed)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="metadata-bench-", dir=args.dir))
    rows: list[tuple[str, str]] = []
    namesrv = None
    try:
        big, small, js = work / "rocksdb-big", work / "rocksdb-small", work / "json"
        s = timed(f"creating {args.topics} topics (RocksDB)", lambda: create_topics(ROCKSDB, big, args.topics))
        rows.append((f"create {args.topics:,} topics in-process, batches of {BATCH:,} (RocksDB)", f"{s:.1f} s"))
        ready_s, rss, peak = timed("broker restart, no name server", lambda: broker_restart(big, ""))
        rows.append((f"broker restart to ready, {args.topics:,} topics, no name server",
                     f"{ready_s:.1f} s, RSS {rss:.0f} MiB (peak {peak:.0f})"))
        if not args.no_namesrv:
            namesrv, ns_addr, _ = spawn("namesrv.main", ["--host", "127.0.0.1", "-p", "0"], work / "namesrv.log")
            ready_s, rss, peak = timed("broker restart, with a name server",
                                       lambda: broker_restart(big, ns_addr))
            rows.append((f"broker restart to ready, {args.topics:,} topics, incl. full registration",
                         f"{ready_s:.1f} s, RSS {rss:.0f} MiB (peak {peak:.0f})"))
        load_s, med, p99 = timed("update cost, big RocksDB", lambda: update_cost(ROCKSDB, big, 5000))
        rows.append((f"in-process load of {args.topics:,} topics (RocksDB)", f"{load_s:.2f} s"))
        rows.append((f"update one topic, {args.topics:,} topics (RocksDB)", f"median {med:.3f} ms, p99 {p99:.3f} ms"))
        create_topics(ROCKSDB, small, args.small_topics)
        _, med, p99 = timed("update cost, small RocksDB", lambda: update_cost(ROCKSDB, small, 5000))
        rows.append((f"update one topic, {args.small_topics:,} topics (RocksDB)",
                     f"median {med:.3f} ms, p99 {p99:.3f} ms"))
        timed(f"creating {args.json_topics} topics (JSON)", lambda: create_topics(JSON, js, args.json_topics))
        _, med, p99 = timed("update cost, JSON", lambda: update_cost(JSON, js, 20))
        rows.append((f"update one topic, {args.json_topics:,} topics (JSON, whole-file rewrite)",
                     f"median {med:.1f} ms, p99 {p99:.1f} ms"))
    finally:
        if namesrv is not None:
            namesrv.terminate()
            namesrv.wait(60)
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}} | result")
    print(f"{'-' * width}-|-{'-' * 40}")
    for label, value in rows:
        print(f"{label:<{width}} | {value}")


if __name__ == "__main__":
    main()
