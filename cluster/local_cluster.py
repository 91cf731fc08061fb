"""``python -m cluster.local_cluster``: a local cluster in the foreground (what ``make run`` starts).

One name server and two brokers (broker-a, broker-b of DefaultCluster) as child processes, each started
through the same module as its console command (``python -m namesrv.main``, ``python -m broker.main -c``).
Under the data directory::

    conf/broker-a.conf, conf/broker-b.conf   written on every start (the brokers read them)
    store/broker-a/, store/broker-b/          each broker's storePathRootDir (kept between runs)
    tiered/broker-a/, tiered/broker-b/        each broker's second tier (tiered storage on, posix backend)
    logs/namesrv.log, logs/broker-*.log       the children's stderr (appended to on every start)

The launcher waits for each child's ``ready on HOST:PORT`` line, then prints the addresses and how to
produce and consume. SIGINT (Ctrl-C) or SIGTERM stops the brokers, then the name server, each with SIGTERM,
and exits 0 once all have exited cleanly. A child that fails to start, or dies while the cluster runs,
gets its last log lines printed; the others are stopped and the launcher exits 1.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker.store.store_lock import StoreLock, StoreLockedError

PROG = "local_cluster"
REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+):(\d+)")
CLUSTER_NAME = "DefaultCluster"
BROKER_NAMES = ("broker-a", "broker-b")
DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORTS = (10911, 10921)
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
TAIL_LINES = 20


class StartError(Exception):
    """A child did not come up; the message says which and why."""

    def __init__(self, child: "Child", reason: str) -> None:
        super().__init__(f"{child.name} {reason}")
        self.child = child


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived while the cluster was starting."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path
    log_start: int  # size of the log when this run started: the tail shown on failure starts here
    addr: str | None = None
    done: threading.Event = field(default_factory=threading.Event)  # ready line seen, or stdout closed
    other_output: list[str] = field(default_factory=list)

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        try:
            with self.log_path.open("rb") as f:
                f.seek(self.log_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return (self.other_output + text.splitlines())[-lines:]


def broker_conf(name: str, port: int, namesrv_addr: str, host: str, store_dir: Path,
                tiered_dir: Path | None = None) -> dict[str, object]:
    """The broker.conf of one local broker (RocketMQ key names); with ``tiered_dir``, tiered storage on (posix
    backend in that directory)."""
    conf: dict[str, object] = {
        "brokerClusterName": CLUSTER_NAME,
        "brokerName": name,
        "brokerId": 0,
        "namesrvAddr": namesrv_addr,
        "brokerIP1": host,
        "listenPort": port,
        "storePathRootDir": store_dir,
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "true",
        "kvEnable": "true",
    }
    if tiered_dir is not None:
        conf |= {"tieredStoreEnable": "true", "tieredBackendServiceProvider": "posix",
                 "tieredStoreFilePath": tiered_dir}
    return conf


# Keys the launcher sets itself from its own options; --broker-conf may set any other broker.conf key.
LAUNCHER_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "brokerIP1", "listenPort",
                           "storePathRootDir"})


def write_conf(path: Path, settings: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by python -m cluster.local_cluster on every start; edits are overwritten\n"]
    lines += [f"{key}={value}\n" for key, value in settings.items()]
    path.write_text("".join(lines))
    return path


class LocalCluster:
    def __init__(self, data_dir: Path, namesrv_port: int, broker_ports: tuple[int, int], host: str = "127.0.0.1",
                 ready_timeout_s: float = READY_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S,
                 extra_conf: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir.resolve()
        self.extra_conf = dict(extra_conf or {})  # --broker-conf: on top of broker_conf()'s keys, both brokers
        self.namesrv_port = namesrv_port
        self.broker_ports = broker_ports
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.stop_requested = threading.Event()
        self.stop_signal: str | None = None
        self.namesrv: Child | None = None
        self.brokers: list[Child] = []
        self.conf_paths: dict[str, Path] = {}

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def children(self) -> list[Child]:
        return [*self.brokers, *([self.namesrv] if self.namesrv else [])]

    # -- start ---------------------------------------------------------------------------------------------
    def spawn(self, name: str, module: str, args: list[str]) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            log_start = log.tell()
            # Own process group: a Ctrl-C in the terminal reaches only the launcher, which stops the
            # children in order (brokers first, so they can unregister from the running name server).
            proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env, text=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, process_group=0)
        child = Child(name, proc, log_path, log_start)
        threading.Thread(target=self._drain, args=(child,), name=f"{name}-stdout", daemon=True).start()
        return child

    @staticmethod
    def _drain(child: Child) -> None:
        """Read the child's stdout until it closes: the ready line, then anything else it prints."""
        assert child.proc.stdout is not None
        for raw in child.proc.stdout:
            line = raw.rstrip("\n")
            m = READY.search(line)
            if m and child.addr is None:
                child.addr = f"{m.group(1)}:{m.group(2)}"
                child.done.set()
            else:
                child.other_output.append(line)
                print(f"[{child.name}] {line}", flush=True)
        child.done.set()

    def wait_ready(self, children: Iterable[Child]) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        for child in children:
            while not child.done.wait(0.05):
                if self.stop_requested.is_set():
                    raise Interrupted
                if time.monotonic() > deadline:
                    raise StartError(child, f"printed no ready line within {self.ready_timeout_s:g}s")
            if child.addr is None:
                try:
                    code = child.proc.wait(5)
                except subprocess.TimeoutExpired:
                    raise StartError(child, "closed its output without a ready line") from None
                raise StartError(child, f"exited with code {code} before its ready line")

    def start(self) -> None:
        """Start the name server, then both brokers; return once all three have printed their ready line."""
        self.namesrv = self.spawn("namesrv", "namesrv.main", ["--host", self.host, "-p", str(self.namesrv_port)])
        self.wait_ready([self.namesrv])
        assert self.namesrv.addr is not None
        for name, port in zip(BROKER_NAMES, self.broker_ports, strict=True):
            settings = broker_conf(name, port, self.namesrv.addr, self.host, self.data_dir / "store" / name,
                                   self.data_dir / "tiered" / name) | self.extra_conf
            conf = self.conf_paths[name] = write_conf(self.data_dir / "conf" / f"{name}.conf", settings)
            self.brokers.append(self.spawn(name, "broker.main", ["-c", str(conf)]))
        self.wait_ready(self.brokers)

    # -- run and stop --------------------------------------------------------------------------------------
    def wait(self) -> Child | None:
        """Block until a stop is requested (returns None) or a child exits on its own (returns it)."""
        while not self.stop_requested.wait(0.2):
            for child in self.children:
                if child.proc.poll() is not None:
                    return child
        return None

    def stop(self) -> bool:
        """SIGTERM the brokers, wait for them, then the name server. True if every child exited with 0."""
        ok = self._stop_all(self.brokers)
        if self.namesrv is not None:
            ok = self._stop_all([self.namesrv]) and ok
        return ok

    def _stop_all(self, children: list[Child]) -> bool:
        running = [child for child in children if child.proc.poll() is None]  # the others were reported
        for child in running:
            print(f"{PROG}: stopping {child.name} (pid {child.proc.pid})", flush=True)
            child.proc.send_signal(signal.SIGTERM)
        ok = len(running) == len(children)
        deadline = time.monotonic() + self.stop_timeout_s
        for child in running:
            try:
                code = child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                code = child.proc.wait()
                print(f"{PROG}: {child.name} did not stop within {self.stop_timeout_s:g}s of SIGTERM; killed it",
                      file=sys.stderr, flush=True)
            if code != 0:
                ok = False
                print(f"{PROG}: {child.name} exited with code {code}; see {child.log_path}", file=sys.stderr,
                      flush=True)
        return ok


# -- output ------------------------------------------------------------------------------------------------
def rel(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, so printed paths stay short."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def mqadmin_command() -> str:
    """How to run mqadmin from here: the console script beside this interpreter (``.venv/bin/mqadmin`` under
    ``make run``, which needs no activated venv), else plain ``mqadmin``."""
    script = Path(sys.executable).parent / "mqadmin"
    return rel(script) if script.exists() else "mqadmin"


def banner(cluster: LocalCluster) -> str:
    assert cluster.namesrv is not None
    ns = cluster.namesrv.addr
    mqadmin = mqadmin_command()
    rows = [f"  namesrv   {ns:<21} pid {cluster.namesrv.proc.pid:<7} log {rel(cluster.namesrv.log_path)}"]
    for broker in cluster.brokers:
        rows.append(f"  {broker.name:<9} {broker.addr:<21} pid {broker.proc.pid:<7} log {rel(broker.log_path)}"
                    f"  conf {rel(cluster.conf_paths[broker.name])}")
    return "\n".join([
        f"{PROG}: cluster {CLUSTER_NAME} ready; name server {ns}",
        *rows,
        f"  data under {rel(cluster.data_dir)} (store/<broker>: message stores, tiered/<broker>: second tiers, "
        "conf/: broker.conf files, logs/: each process's stderr)",
        "",
        "Look at it:",
        f"  {mqadmin} -n {ns} clusterList",
        "",
        "Produce and consume (Python SDK; a topic is created on its first send):",
        "  from client import Message, Producer, PullConsumer",
        "",
        f'  with Producer("{ns}") as producer:',
        '      print(producer.send(Message("TestTopic", b"hello")))',
        "",
        f'  with PullConsumer("{ns}", group="demo") as consumer:',
        '      for mq in consumer.queues("TestTopic"):',
        "          offset = 0",
        "          while True:",
        "              result = consumer.pull(mq, offset=offset, max_nums=32)",
        "              for msg in result.messages:",
        "                  print(mq.broker_name, mq.queue_id, msg.queue_offset, msg.body)",
        "              if not result.messages:",
        "                  break",
        "              offset = result.next_begin_offset",
        "",
        "Key-value store (kvEnable=true: the first use creates its shards; kvInit only chooses their number):",
        f"  {mqadmin} -n {ns} kvPut -k greeting -v hello && {mqadmin} -n {ns} kvGet -k greeting",
        "",
        f"Tiered storage (each broker's tier under {rel(cluster.data_dir / 'tiered')}):",
        f"  {mqadmin} -n {ns} tieredStatus -t TestTopic",
        "",
        "Ctrl-C (or SIGTERM) stops the brokers, then the name server.",
    ])


def print_failure(child: Child, reason: str) -> None:
    lines = child.tail()
    where = f"last lines of {rel(child.log_path)}" if lines else f"{rel(child.log_path)} is empty"
    print(f"{PROG}: {reason}; {where}:", file=sys.stderr)
    for line in lines:
        print(f"  | {line}", file=sys.stderr)
    sys.stderr.flush()


# -- command line ------------------------------------------------------------------------------------------
def port(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..65535")
    return value


def broker_ports(raw: str) -> tuple[int, int]:
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != len(BROKER_NAMES):
        raise argparse.ArgumentTypeError(f"{raw!r}: give {len(BROKER_NAMES)} ports, comma-separated (e.g. 10911,10921)")
    a, b = (port(p) for p in parts)
    if a == b != 0:
        raise argparse.ArgumentTypeError(f"{raw!r}: the brokers need different ports")
    return a, b


def conf_entry(raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"{raw!r}: give KEY=VALUE, e.g. flushDiskType=SYNC_FLUSH")
    if key in LAUNCHER_KEYS:
        raise argparse.ArgumentTypeError(f"{key} is set by the launcher (see --data-dir, --broker-ports, --host)")
    return key, value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m cluster.{PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("run-data"),
                        help="where the broker stores, broker.conf files and logs go (default: ./run-data)")
    parser.add_argument("--namesrv-port", type=port, default=DEFAULT_NAMESRV_PORT,
                        help="name server port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--broker-ports", type=broker_ports, default=DEFAULT_BROKER_PORTS,
                        help="listenPort of broker-a and broker-b; 0 picks a free one (default: 10911,10921)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address every process listens on and advertises (default: %(default)s)")
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S,
                        help="seconds each start-up step may take (default: %(default)s)")
    parser.add_argument("--broker-conf", type=conf_entry, action="append", default=[], metavar="KEY=VALUE",
                        help="a broker.conf key for both brokers, on top of the launcher's (repeatable), "
                             "e.g. --broker-conf storeType=defaultRocksDB")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = LocalCluster(args.data_dir, args.namesrv_port, args.broker_ports, args.host, args.ready_timeout,
                           extra_conf=dict(args.broker_conf))

    def on_signal(signum: int, _frame: object) -> None:  # no printing here: it may interrupt a print
        cluster.stop_signal = cluster.stop_signal or signal.Signals(signum).name
        cluster.stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:  # one launcher per data dir: a second would share its brokers' stores (each broker also locks its own)
        launcher_lock = StoreLock(cluster.data_dir, owner="local cluster launcher").acquire()
    except StoreLockedError as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        cluster.start()
    except StartError as exc:
        print_failure(exc.child, str(exc))
        cluster.stop()
        return 1
    except Interrupted:
        print(f"{PROG}: {cluster.stop_signal} received while starting, stopping", flush=True)
        return 0 if cluster.stop() else 1
    except OSError as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    print(banner(cluster), flush=True)

    died = cluster.wait()
    if died is not None:
        print_failure(died, f"{died.name} exited on its own with code {died.proc.returncode}")
        cluster.stop()
        return 1
    print(f"{PROG}: {cluster.stop_signal} received, stopping", flush=True)
    ok = cluster.stop()
    print(f"{PROG}: stopped" if ok else f"{PROG}: stopped, not all cleanly", flush=True)
    launcher_lock.release()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
