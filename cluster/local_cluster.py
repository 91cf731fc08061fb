"""``python -m cluster.local_cluster``: a local cluster in the foreground (what ``make run`` starts).

One name server, two brokers (broker-a, broker-b of DefaultCluster) and the RocketMQ 5 proxy (``mqproxy``, for
the official clients; ``--proxy-port``) as child processes, each started through the same module as its console
command (``python -m namesrv.main``, ``python -m broker.main -c``, ``python -m proxy.main``).
Under the data directory::

    conf/broker-a.conf, conf/broker-b.conf   written on every start (the brokers read them)
    store/broker-a/, store/broker-b/          each broker's storePathRootDir (kept between runs)
    tiered/broker-a/, tiered/broker-b/        each broker's second tier (tiered storage on, posix backend)
    logs/namesrv.log, logs/broker-*.log,      the children's stderr (appended to on every start)
    logs/mqproxy.log

With ``--with-slave`` (``make run SLAVE=1``) broker-a is a replica group in controller mode: the name server runs
the replication controller (its store in ``controller/``), and two processes serve broker-a, ``broker-a``
(brokerId 1, its usual port) and ``broker-a-s`` (brokerId 2, ``--slave-port``), each with a fixed haListenPort
(its listenPort + 1) and slaveReadEnable=true; the controller elects the master. broker-b is unchanged.

The launcher waits for each child's ``ready on HOST:PORT`` line (and, with ``--with-slave``, for broker-a's group
to have a master and its slave routed), then prints the addresses and how to produce and consume. SIGINT
(Ctrl-C) or SIGTERM stops the proxy, then the brokers, then the name server, each with SIGTERM, and exits 0 once
all have exited cleanly. A child that fails to start, or dies while the cluster runs (a replica too), gets its last
log lines printed; the others are stopped and the launcher exits 1.
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

from broker.broker_config import load_broker_config
from broker.store.store_lock import StoreLock
from client import Admin, MQClientError

PROG = "local_cluster"
REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"ready on (\S+):(\d+)")
CLUSTER_NAME = "DefaultCluster"
BROKER_NAMES = ("broker-a", "broker-b")
DEFAULT_NAMESRV_PORT = 9876
DEFAULT_BROKER_PORTS = (10911, 10921)
# --with-slave: broker-a's second replica (a process of its own, brokerName broker-a) and its listenPort.
GROUP_NAME = "broker-a"
SLAVE_NAME = "broker-a-s"
DEFAULT_SLAVE_PORT = 10915
PROXY_NAME = "mqproxy"
DEFAULT_PROXY_PORT = 8081  # the RocketMQ 5 proxy's port by convention
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


@dataclass(frozen=True)
class Replica:
    """Controller mode: this broker is replica ``broker_id`` (1 or more) of its group, the controller at
    ``controller_addr`` elects the group's master, and replication listens on ``ha_port``."""
    broker_id: int
    controller_addr: str
    ha_port: int


def ha_port(listen_port: int) -> int:
    """A replica's haListenPort: the port after its listenPort (RocketMQ's 10911/10912), or 0 (a free one) when
    the listenPort is 0."""
    return listen_port + 1 if listen_port else 0


def broker_conf(name: str, port: int, namesrv_addr: str, host: str, store_dir: Path,
                tiered_dir: Path | None = None, replica: Replica | None = None) -> dict[str, object]:
    """The broker.conf of one local broker (RocketMQ key names); with ``tiered_dir``, tiered storage on (posix
    backend in that directory); with ``replica``, a replica of group ``name`` in controller mode, serving reads
    while it is a slave."""
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
    if replica is not None:
        conf |= {"brokerId": replica.broker_id, "enableControllerMode": "true",
                 "controllerAddr": replica.controller_addr, "haListenPort": replica.ha_port,
                 "slaveReadEnable": "true"}
    return conf


# Keys the launcher sets itself from its own options; --broker-conf may set any other broker.conf key.
LAUNCHER_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "brokerIP1", "listenPort",
                           "storePathRootDir"})
# ... and, with --with-slave, these as well (broker-a's replicas need them; broker-b gets none of them).
REPLICA_KEYS = frozenset({"enableControllerMode", "controllerAddr", "haListenPort"})


@dataclass(frozen=True)
class BrokerPlan:
    """One broker process: its name (the log's, conf's and store's), brokerName, listenPort and replica role."""
    name: str
    broker_name: str
    port: int
    replica_id: int = 0  # 0: a plain broker; 1 or more: a controller-mode replica of broker_name


def broker_plan(broker_ports: tuple[int, int], slave_port: int | None = None) -> list[BrokerPlan]:
    """The brokers to start: broker-a and broker-b, and with ``slave_port`` broker-a's second replica."""
    (a, port_a), (b, port_b) = zip(BROKER_NAMES, broker_ports, strict=True)
    if slave_port is None:
        return [BrokerPlan(a, a, port_a), BrokerPlan(b, b, port_b)]
    return [BrokerPlan(a, GROUP_NAME, port_a, 1), BrokerPlan(SLAVE_NAME, GROUP_NAME, slave_port, 2),
            BrokerPlan(b, b, port_b)]


def write_conf(path: Path, settings: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by python -m cluster.local_cluster on every start; edits are overwritten\n"]
    lines += [f"{key}={value}\n" for key, value in settings.items()]
    path.write_text("".join(lines))
    return path


class LocalCluster:
    def __init__(self, data_dir: Path, namesrv_port: int, broker_ports: tuple[int, int], host: str = "127.0.0.1",
                 ready_timeout_s: float = READY_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S,
                 extra_conf: dict[str, str] | None = None, slave_port: int | None = None,
                 proxy_port: int = DEFAULT_PROXY_PORT) -> None:
        self.data_dir = data_dir.resolve()
        self.extra_conf = dict(extra_conf or {})  # --broker-conf: on top of broker_conf()'s keys, every broker
        self.namesrv_port = namesrv_port
        self.broker_ports = broker_ports
        self.plan = broker_plan(broker_ports, slave_port)
        self.with_slave = slave_port is not None
        self.host = host
        self.proxy_port = proxy_port
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.stop_requested = threading.Event()
        self.stop_signal: str | None = None
        self.namesrv: Child | None = None
        self.brokers: list[Child] = []
        self.proxy: Child | None = None
        self.conf_paths: dict[str, Path] = {}
        self.roles: dict[str, str] = {}  # --with-slave: child name -> MASTER or SLAVE, as routed at start-up

    @property
    def controller_store(self) -> Path:
        return self.data_dir / "controller"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def children(self) -> list[Child]:
        return [*([self.proxy] if self.proxy else []), *self.brokers, *([self.namesrv] if self.namesrv else [])]

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
        """Start the name server, then the brokers, then the proxy; return once all have printed their ready line
        (and, with a slave, once broker-a's group has a master and a slave)."""
        namesrv_args = ["--host", self.host, "-p", str(self.namesrv_port)]
        if self.with_slave:
            namesrv_args += ["--enable-controller", "--controller-store-path", str(self.controller_store)]
        self.namesrv = self.spawn("namesrv", "namesrv.main", namesrv_args)
        self.wait_ready([self.namesrv])
        assert self.namesrv.addr is not None
        deadline = time.monotonic() + self.ready_timeout_s
        for plan in self.plan:
            replica = (Replica(plan.replica_id, self.namesrv.addr, ha_port(plan.port)) if plan.replica_id
                       else None)
            settings = broker_conf(plan.broker_name, plan.port, self.namesrv.addr, self.host,
                                   self.data_dir / "store" / plan.name, self.data_dir / "tiered" / plan.name,
                                   replica) | self.extra_conf
            conf = self.conf_paths[plan.name] = write_conf(self.data_dir / "conf" / f"{plan.name}.conf", settings)
            self.brokers.append(self.spawn(plan.name, "broker.main", ["-c", str(conf)]))
            if plan.replica_id == 1:
                # The first replica up is the one the controller elects, so broker-a (at its usual port) is the
                # master of a fresh group: start its slave once it serves.
                self.wait_ready(self.brokers[-1:])
        self.wait_ready(self.brokers)
        if self.with_slave:
            self.wait_group(deadline)
        self.proxy = self.spawn(PROXY_NAME, "proxy.main",
                                ["-n", self.namesrv.addr, "--host", self.host, "-p", str(self.proxy_port)])
        self.wait_ready([self.proxy])

    def wait_group(self, deadline: float) -> None:
        """Wait until the name server routes broker-a's group with a master (broker id 0) and its slave; note
        which replica is which (a group that ran before keeps the master it had)."""
        assert self.namesrv is not None and self.namesrv.addr is not None
        replicas = [child for child, plan in zip(self.brokers, self.plan, strict=True) if plan.replica_id]
        addrs = {child.name: child.addr for child in replicas if child.addr is not None}  # all: each was ready
        with Admin(self.namesrv.addr, rpc_timeout_ms=2000) as admin:
            while True:
                try:
                    routed = {b.addr: b.broker_id for b in admin.all_brokers() if b.broker_name == GROUP_NAME}
                except MQClientError:
                    routed = {}
                if (len(addrs) == len(replicas) and all(addr in routed for addr in addrs.values())
                        and any(routed[addr] == 0 for addr in addrs.values())):
                    self.roles = {name: "MASTER" if routed[addr] == 0 else "SLAVE" for name, addr in addrs.items()}
                    return
                for child in self.children:
                    if child.proc.poll() is not None:
                        raise StartError(child, f"exited with code {child.proc.returncode} while {GROUP_NAME}'s "
                                                "group was forming")
                if self.stop_requested.wait(0.1):
                    raise Interrupted
                if time.monotonic() > deadline:
                    raise StartError(replicas[0], f"and {SLAVE_NAME}: no master of {GROUP_NAME} with its slave "
                                                  f"routed within {self.ready_timeout_s:g}s")

    # -- run and stop --------------------------------------------------------------------------------------
    def wait(self) -> Child | None:
        """Block until a stop is requested (returns None) or a child exits on its own (returns it)."""
        while not self.stop_requested.wait(0.2):
            for child in self.children:
                if child.proc.poll() is not None:
                    return child
        return None

    def stop(self) -> bool:
        """SIGTERM the proxy (its clients' calls go to the brokers), then the brokers, wait for them, then the name
        server. True if every child exited with 0."""
        ok = self._stop_all([self.proxy]) if self.proxy is not None else True
        ok = self._stop_all(self.brokers) and ok
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


def heartbeat_timeout_s(cluster: LocalCluster) -> float:
    """How long the controller waits before replacing a silent master: broker-a's controllerHeartBeatTimeoutMills
    (--broker-conf may set it), as the broker reads it."""
    conf = load_broker_config(cluster.conf_paths[GROUP_NAME].read_text())
    return conf.controller_heart_beat_timeout_mills / 1000


def replica_group_lines(cluster: LocalCluster, mqadmin: str) -> list[str]:
    """--with-slave: what the group is and how to watch a failover (under the launcher a process that exits stops
    everything, so pause the master instead)."""
    assert cluster.namesrv is not None
    roles = ", ".join(f"{name} {role}" for name, role in cluster.roles.items())
    master = next(child for child in cluster.brokers if cluster.roles.get(child.name) == "MASTER")
    return [
        f"{GROUP_NAME} is a replica group: {roles} at start (the route shows the master as broker id 0).",
        f"The controller replaces a master silent for {heartbeat_timeout_s(cluster):g}s with an in-sync slave; to "
        f"watch it, pause the master (kill -STOP {master.proc.pid}, later kill -CONT {master.proc.pid}: it rejoins "
        "as a slave).",
        f"  {mqadmin} -n {cluster.namesrv.addr} getSyncStateSet -b {GROUP_NAME}",
    ]


def banner(cluster: LocalCluster) -> str:
    assert cluster.namesrv is not None
    ns = cluster.namesrv.addr
    mqadmin = mqadmin_command()
    width = max(len(child.name) for child in cluster.children)
    rows = [f"  {'namesrv':<{width}} {ns:<21} pid {cluster.namesrv.proc.pid:<7} log {rel(cluster.namesrv.log_path)}"
            + ("  (runs the replication controller)" if cluster.with_slave else "")]
    for broker, plan in zip(cluster.brokers, cluster.plan, strict=True):
        role = cluster.roles.get(broker.name)
        rows.append(f"  {broker.name:<{width}} {broker.addr:<21} pid {broker.proc.pid:<7} log {rel(broker.log_path)}"
                    f"  conf {rel(cluster.conf_paths[broker.name])}"
                    + (f"  {plan.broker_name} replica {plan.replica_id}: {role}" if role else ""))
    if cluster.proxy is not None:
        rows.append(f"  {cluster.proxy.name:<{width}} {cluster.proxy.addr:<21} pid {cluster.proxy.proc.pid:<7} "
                    f"log {rel(cluster.proxy.log_path)}  (RocketMQ 5 proxy for the official clients)")
    group = replica_group_lines(cluster, mqadmin) if cluster.with_slave else []
    data = (f"  data under {rel(cluster.data_dir)} (store/<broker>: message stores, tiered/<broker>: second tiers, "
            "conf/: broker.conf files, logs/: each process's stderr"
            + (", controller/: the controller's decisions)" if cluster.with_slave else ")"))
    return "\n".join([
        f"{PROG}: cluster {CLUSTER_NAME} ready; name server {ns}",
        *rows,
        data,
        "",
        "Look at it:",
        f"  {mqadmin} -n {ns} clusterList",
        *group,
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
        *proxy_lines(cluster),
        "Key-value store (kvEnable=true: the first use creates its shards; kvInit only chooses their number):",
        f"  {mqadmin} -n {ns} kvPut -k greeting -v hello && {mqadmin} -n {ns} kvGet -k greeting",
        "",
        f"Tiered storage (each broker's tier under {rel(cluster.data_dir / 'tiered')}):",
        f"  {mqadmin} -n {ns} tieredStatus -t TestTopic",
        "",
        "Ctrl-C (or SIGTERM) stops the proxy, then the brokers, then the name server.",
    ])


def proxy_lines(cluster: LocalCluster) -> list[str]:
    """How to point an official RocketMQ 5 client at the proxy."""
    if cluster.proxy is None:
        return []
    return [
        f"RocketMQ 5 clients (official SDKs, e.g. pip install rocketmq-python-client): endpoint {cluster.proxy.addr}",
        "  from rocketmq import ClientConfiguration, Credentials, Message, Producer",
        f'  producer = Producer(ClientConfiguration("{cluster.proxy.addr}", Credentials()), ("TestTopic",))',
        "",
    ]


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


def check_slave_ports(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--with-slave: broker-a and broker-a-s listen on their ports and the next ones (replication); every fixed
    port must be free of the others."""
    if args.slave_port is None:
        return
    ports = [("--namesrv-port", args.namesrv_port), ("--broker-ports (broker-b)", args.broker_ports[1])]
    for what, value in (("--broker-ports (broker-a)", args.broker_ports[0]), ("--slave-port", args.slave_port)):
        ports += [(what, value), (f"{what} + 1 (its haListenPort)", ha_port(value))]
    for what, value in ports:
        if value > 65535:
            parser.error(f"{what} is {value}: outside 0..65535")
    seen: dict[int, str] = {}
    for what, value in ports:
        if value and value in seen:
            parser.error(f"{seen[value]} and {what} are both {value}; with --with-slave each needs its own port")
        seen.setdefault(value, what)


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
                        help="a broker.conf key for every broker, on top of the launcher's (repeatable), "
                             "e.g. --broker-conf storeType=defaultRocksDB")
    parser.add_argument("--proxy-port", type=port, default=DEFAULT_PROXY_PORT,
                        help="port of the RocketMQ 5 proxy (mqproxy, for the official clients); 0 picks a free one "
                             "(default: %(default)s)")
    parser.add_argument("--with-slave", action="store_true",
                        help=f"run {GROUP_NAME} as a two-replica group in controller mode: the name server runs "
                             f"the controller, {SLAVE_NAME} is the second replica; each replica's haListenPort is "
                             "its listenPort + 1 (make run SLAVE=1)")
    parser.add_argument("--slave-port", type=port, default=None,
                        help=f"with --with-slave, the listenPort of {SLAVE_NAME}; 0 picks a free one "
                             f"(default: {DEFAULT_SLAVE_PORT})")
    args = parser.parse_args(argv)
    if args.slave_port is not None and not args.with_slave:
        parser.error("--slave-port needs --with-slave")
    if args.with_slave:
        args.slave_port = DEFAULT_SLAVE_PORT if args.slave_port is None else args.slave_port
        refused = sorted({key for key, _ in args.broker_conf} & REPLICA_KEYS)
        if refused:
            parser.error(f"--broker-conf: {', '.join(refused)} is set by the launcher with --with-slave")
    check_slave_ports(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = LocalCluster(args.data_dir, args.namesrv_port, args.broker_ports, args.host, args.ready_timeout,
                           extra_conf=dict(args.broker_conf), slave_port=args.slave_port, proxy_port=args.proxy_port)

    def on_signal(signum: int, _frame: object) -> None:  # no printing here: it may interrupt a print
        cluster.stop_signal = cluster.stop_signal or signal.Signals(signum).name
        cluster.stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:  # one launcher per data dir: a second would share its brokers' stores (each broker also locks its own)
        launcher_lock = StoreLock(cluster.data_dir, owner="local cluster launcher", setting="--data-dir").acquire()
    except OSError as exc:  # held by another launcher (StoreLockedError), or the directory cannot be made
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
