"""``python -m cluster.local_cluster`` (what ``make run`` starts), run as a subprocess like a user would."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from broker.broker_config import load_broker_config
from client import Admin, KVClient, Message, MQClientError, Producer, PullConsumer, PullStatus
from cluster.local_cluster import broker_plan, ha_port, parse_args
from proto.v2 import definition_pb2, service_pb2, service_pb2_grpc

REPO = Path(__file__).resolve().parent.parent.parent
UP = re.compile(r"cluster DefaultCluster ready; name server (\S+)")
ROW = re.compile(r"^\s+(namesrv|broker-a-s|broker-a|broker-b|mqproxy)\s+(\S+)\s+pid (\d+)")
STOPPING = re.compile(r"stopping (\S+) \(pid (\d+)\)")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


@dataclass
class Launcher:
    proc: subprocess.Popen
    data_dir: Path
    lines: list[str] = field(default_factory=list)
    children: dict[str, int] = field(default_factory=dict)  # name -> pid
    cmdlines: dict[int, bytes] = field(default_factory=dict)

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: re.Pattern, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := pattern.search(line):
                    return m
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern.pattern!r} within {timeout}s "
                             f"(exit code {self.proc.poll()}):\n{self.output()}")

    def remember(self, name: str, pid: int) -> None:
        self.children[name] = pid
        self.cmdlines[pid] = cmdline(pid)


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(launcher: Launcher, pid: int) -> bool:
    """The child with this pid still exists (and the pid was not reused by another program)."""
    return bool(cmdline(pid)) and cmdline(pid) == launcher.cmdlines.get(pid)


def start(data_dir: Path, *extra: str) -> Launcher:
    proc = subprocess.Popen(  # the proxy on a free port unless a test names one: 8081 may be taken here
        [sys.executable, "-m", "cluster.local_cluster", "--data-dir", str(data_dir), "--proxy-port", "0", *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    launcher = Launcher(proc, data_dir)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            launcher.lines.append(line.rstrip("\n"))

    launcher._reader = threading.Thread(target=read, daemon=True)  # type: ignore[attr-defined]
    launcher._reader.start()  # type: ignore[attr-defined]
    return launcher


@pytest.fixture
def launchers() -> Iterator[list[Launcher]]:
    """Whatever a test starts is gone afterwards, even when the test fails half-way."""
    started: list[Launcher] = []
    yield started
    for launcher in started:
        if launcher.proc.poll() is None:
            launcher.proc.kill()
            launcher.proc.wait(10)
        for pid in launcher.children.values():
            if alive(launcher, pid):
                os.kill(pid, signal.SIGKILL)


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except MQClientError as exc:  # not there yet (route, auto-created topic): ask again
            last, value = exc, None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last}")


def start_cluster(launchers: list[Launcher], data_dir: Path, *extra: str,
                  brokers: tuple[str, ...] = ("broker-a", "broker-b")) -> tuple[Launcher, str]:
    launcher = start(data_dir, "--namesrv-port", "0", "--broker-ports", "0,0", *extra)
    launchers.append(launcher)
    namesrv = launcher.wait_for(UP, START_TIMEOUT_S).group(1)
    for line in launcher.lines:
        if m := ROW.match(line):
            launcher.remember(m.group(1), int(m.group(3)))
    assert set(launcher.children) == {"namesrv", "mqproxy", *brokers}, launcher.output()
    for name, pid in launcher.children.items():
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        assert ppid == launcher.proc.pid, f"{name} (pid {pid}) is not a child of the launcher"
        # own process group: a Ctrl-C in the terminal reaches only the launcher, which stops them in order
        assert os.getpgid(pid) != os.getpgid(launcher.proc.pid)
    return launcher, namesrv


def stop_and_check(launcher: Launcher, sig: int = signal.SIGTERM,
                   brokers: tuple[str, ...] = ("broker-a", "broker-b")) -> None:
    launcher.proc.send_signal(sig)
    try:
        code = launcher.proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"launcher still running {STOP_TIMEOUT_S}s after {sig!r}:\n{launcher.output()}") from None
    launcher._reader.join(10)  # type: ignore[attr-defined]
    assert code == 0, launcher.output()
    left = [name for name, pid in launcher.children.items() if alive(launcher, pid)]
    assert left == [], f"still running after the launcher exited: {left}"
    order = [m.group(1) for line in launcher.lines if (m := STOPPING.search(line))]
    assert order[:1] == ["mqproxy"] and sorted(order[1:-1]) == sorted(brokers) and order[-1:] == ["namesrv"], (
        launcher.output())


# ---- tests ------------------------------------------------------------------------------------------------------
def test_cluster_serves_an_auto_created_topic_and_stops_on_sigterm(tmp_path: Path, launchers: list[Launcher]):
    data_dir = tmp_path / "run-data"
    launcher, namesrv = start_cluster(launchers, data_dir)
    output = launcher.output()
    assert f'Producer("{namesrv}")' in output and f"mqadmin -n {namesrv} clusterList" in output

    with Admin(namesrv) as admin:
        brokers = wait_until(lambda: [b for b in admin.brokers("DefaultCluster")
                                      if b.broker_name in ("broker-a", "broker-b")],
                             10, "both brokers in the cluster")
    assert sorted(b.broker_name for b in brokers) == ["broker-a", "broker-b"]

    topic = f"LocalClusterTopic{uuid.uuid4().hex[:8]}"
    body = f"hello {topic}".encode()
    with Producer(namesrv, group="local-cluster-test") as producer:
        # autoCreateTopicEnable=true: the first send to an unknown topic creates it (no admin step)
        sent = wait_until(lambda: producer.send(Message(topic, body)), 5, f"a send to the new topic {topic}")
    with PullConsumer(namesrv, group="local-cluster-test") as consumer:
        queues = wait_until(lambda: consumer.queues(topic), 30, f"the route of {topic}")
        assert sent.queue in queues

        def pulled():
            result = consumer.pull(sent.queue, offset=sent.queue_offset, max_nums=32)
            return result if result.status is PullStatus.FOUND else None

        result = wait_until(pulled, 30, f"the message on {sent.queue}")
    assert [m.body for m in result.messages] == [body]

    # the launcher's own files: broker.conf files it wrote, stores and logs under the data dir
    for name in ("broker-a", "broker-b"):
        conf = load_broker_config((data_dir / "conf" / f"{name}.conf").read_text())
        assert conf.unknown_keys == []
        assert (conf.broker_name, conf.broker_cluster_name, conf.flush_disk_type) == \
            (name, "DefaultCluster", "ASYNC_FLUSH")
        assert conf.auto_create_topic_enable and conf.namesrv_addrs == [namesrv]
        assert Path(conf.store_path_root_dir) == (data_dir / "store" / name).resolve()
        assert (Path(conf.store_path_root_dir) / "commitlog").is_dir()
        # the README's KV and tiered examples run on this cluster as it comes
        assert conf.kv_enable and conf.tiered_store_enable
        assert conf.tiered_backend_service_provider.value == "posix"
        assert Path(conf.tiered_store_file_path) == (data_dir / "tiered" / name).resolve()
    for name in ("namesrv", "broker-a", "broker-b"):
        assert (data_dir / "logs" / f"{name}.log").stat().st_size > 0

    # tiered storage on: the message reaches its broker's tier (posix objects under <data-dir>/tiered/<broker>)
    with Admin(namesrv) as admin:
        def uploaded() -> bool:
            (status,) = [r for r in admin.tiered_status(topic) if r.broker_name == sent.queue.broker_name]
            queue = next(q for q in status.queues if q.queue_id == sent.queue.queue_id)
            return queue.tiered_max_offset == sent.queue_offset + 1 and queue.upload_lag == 0
        wait_until(uploaded, 30, f"{sent.queue} in the tier")
    assert any(p.is_file() for p in (data_dir / "tiered" / sent.queue.broker_name).rglob("*"))
    # KV on: the store provisions itself on first use, no kvInit
    with KVClient(namesrv) as kv:
        kv.put(b"local-cluster", body)
        assert kv.get(b"local-cluster") == body

    # the RocketMQ 5 proxy routes the topic for the official clients (they send every call to it)
    proxy = next(m.group(2) for line in launcher.lines if (m := ROW.match(line)) and m.group(1) == "mqproxy")
    assert f'ClientConfiguration("{proxy}"' in output
    with grpc.insecure_channel(proxy) as channel:
        route = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic)), timeout=10)
    assert route.status.code == definition_pb2.OK and route.message_queues
    assert (data_dir / "logs" / "mqproxy.log").stat().st_size > 0

    stop_and_check(launcher)


def test_broker_conf_option_reaches_both_brokers(tmp_path: Path, launchers: list[Launcher]):
    launcher, namesrv = start_cluster(launchers, tmp_path / "data", "--broker-conf", "flushDiskType=SYNC_FLUSH",
                                      "--broker-conf", "storeType=defaultRocksDB")
    for name in ("broker-a", "broker-b"):
        conf = load_broker_config((tmp_path / "data" / "conf" / f"{name}.conf").read_text())
        assert conf.unknown_keys == [] and conf.tiered_store_enable  # on top of the launcher's keys
    with Admin(namesrv) as admin:
        brokers = wait_until(lambda: [b for b in admin.brokers("DefaultCluster")
                                      if b.broker_name in ("broker-a", "broker-b")], 10, "both brokers")
        infos = [admin.broker_runtime_info(b.addr) for b in brokers]
    assert len(infos) == 2
    assert {(i["flushDiskType"], i["storeType"]) for i in infos} == {("SYNC_FLUSH", "defaultRocksDB")}
    stop_and_check(launcher)


@pytest.mark.parametrize(("entry", "says"), [("listenPort=1", "listenPort is set by the launcher"),
                                              ("flushDiskType", "give KEY=VALUE")])
def test_broker_conf_option_refuses_launcher_keys_and_malformed_entries(tmp_path: Path, entry: str, says: str):
    proc = subprocess.run([sys.executable, "-m", "cluster.local_cluster", "--data-dir", str(tmp_path / "data"),
                           "--broker-conf", entry], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started


def test_a_data_dir_that_cannot_be_made_is_one_line_naming_it(tmp_path: Path):
    (tmp_path / "file").write_text("not a directory")
    data = tmp_path / "file" / "data"
    proc = subprocess.run([sys.executable, "-m", "cluster.local_cluster", "--data-dir", str(data)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert f"--data-dir={data}" in proc.stderr, proc.stderr


def test_ctrl_c_stops_the_cluster_cleanly(tmp_path: Path, launchers: list[Launcher]):
    launcher, _ = start_cluster(launchers, tmp_path / "data")
    stop_and_check(launcher, signal.SIGINT)


def test_a_broker_that_cannot_start_stops_the_others(tmp_path: Path, launchers: list[Launcher]):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        launcher = start(tmp_path / "data", "--namesrv-port", "0", "--broker-ports", f"0,{port}")
        launchers.append(launcher)
        try:
            code = launcher.proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"launcher still running:\n{launcher.output()}") from None
    launcher._reader.join(10)  # type: ignore[attr-defined]
    output = launcher.output()
    assert code == 1, output
    assert "broker-b exited with code 1 before its ready line" in output
    assert f"last lines of {tmp_path / 'data' / 'logs' / 'broker-b.log'}" in output
    assert re.search(rf"\|.*{port}", output), "the tail of broker-b's log should show the failed bind"
    assert "cluster DefaultCluster ready" not in output
    stopped = {m.group(1): int(m.group(2)) for line in launcher.lines if (m := STOPPING.search(line))}
    assert set(stopped) == {"namesrv", "broker-a"}, output
    for name, pid in stopped.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name} (pid {pid}) still running"


def test_a_broker_that_dies_takes_the_cluster_down(tmp_path: Path, launchers: list[Launcher]):
    launcher, _ = start_cluster(launchers, tmp_path / "data")
    os.kill(launcher.children["broker-a"], signal.SIGKILL)
    try:
        code = launcher.proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"launcher still running after broker-a died:\n{launcher.output()}") from None
    launcher._reader.join(10)  # type: ignore[attr-defined]
    assert code == 1, launcher.output()
    assert "broker-a exited on its own with code -9" in launcher.output()
    assert [name for name, pid in launcher.children.items() if alive(launcher, pid)] == []


def test_a_second_launcher_on_the_same_data_dir_says_so_in_one_line(tmp_path: Path, launchers: list[Launcher]):
    first, _ = start_cluster(launchers, tmp_path / "data")
    second = start(tmp_path / "data", "--namesrv-port", "0", "--broker-ports", "0,0")
    launchers.append(second)
    try:
        code = second.proc.wait(START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"second launcher still running:\n{second.output()}") from None
    second._reader.join(10)  # type: ignore[attr-defined]
    lines = [line for line in second.lines if line.strip()]
    assert code == 1 and len(lines) == 1, second.output()
    assert f"in use by pid {first.proc.pid}" in lines[0] and str(tmp_path / "data") in lines[0], lines
    assert "Traceback" not in second.output()
    assert all(alive(first, pid) for pid in first.children.values())  # the first cluster keeps serving
    stop_and_check(first)


# ---- --with-slave (make run SLAVE=1): broker-a as a replica group under the name server's controller ------------
WITH_SLAVE = ("broker-a", "broker-a-s", "broker-b")


def mqadmin_json(*args: str) -> object:
    proc = subprocess.run([sys.executable, "-m", "admin_cli.main", *args, "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_with_slave_runs_broker_a_as_a_master_and_a_slave(tmp_path: Path, launchers: list[Launcher]):
    data_dir = tmp_path / "data"
    launcher, namesrv = start_cluster(launchers, data_dir, "--with-slave", "--slave-port", "0", "--broker-conf",
                                      "controllerHeartBeatTimeoutMills=4000", brokers=WITH_SLAVE)
    output = launcher.output()
    addr = {m.group(1): m.group(2) for line in launcher.lines if (m := ROW.match(line))}
    # the status table shows each replica's role: broker-a (started first) is a fresh group's master
    assert re.search(r"^\s+broker-a\s.*broker-a replica 1: MASTER$", output, re.M), output
    assert re.search(r"^\s+broker-a-s\s.*broker-a replica 2: SLAVE$", output, re.M), output
    assert re.search(r"^\s+namesrv\s.*runs the replication controller", output, re.M), output
    assert f"-n {namesrv} getSyncStateSet -b broker-a" in output
    assert "a master silent for 4s with an in-sync slave; to watch it, pause the master " \
           f"(kill -STOP {launcher.children['broker-a']}" in output

    # the broker.conf files it wrote: two replicas of broker-a under the controller, broker-b as without the flag
    confs = {name: load_broker_config((data_dir / "conf" / f"{name}.conf").read_text()) for name in WITH_SLAVE}
    for name, broker_id in (("broker-a", 1), ("broker-a-s", 2)):
        conf = confs[name]
        assert conf.unknown_keys == [] and conf.broker_name == "broker-a" and conf.broker_id == broker_id
        assert conf.enable_controller_mode and conf.controller_addr == namesrv and conf.slave_read_enable
        assert conf.ha_listen_port == 0  # --broker-ports 0,0 and --slave-port 0: free ports
        assert Path(conf.store_path_root_dir) == (data_dir / "store" / name).resolve()
        assert conf.kv_enable and conf.tiered_store_enable  # the same keys as every make run broker
    assert not confs["broker-b"].enable_controller_mode and confs["broker-b"].broker_id == 0
    # --broker-conf reaches every broker, the replica too
    assert {c.controller_heart_beat_timeout_mills for c in confs.values()} == {4000}
    assert (data_dir / "controller" / "replicas.json").is_file()  # the controller's store, under the data dir

    # mqadmin clusterList: broker-a's master as broker id 0, its slave under its own id; broker-b unchanged
    rows = mqadmin_json("-n", namesrv, "clusterList")
    assert isinstance(rows, list)
    routed = sorted((r["broker_name"], r["broker_id"], r["addr"], r["status"]) for r in rows)
    assert routed == [("broker-a", 0, addr["broker-a"], "OK"), ("broker-a", 2, addr["broker-a-s"], "OK"),
                      ("broker-b", 0, addr["broker-b"], "OK")], rows
    with Admin(namesrv) as admin:
        roles = {name: admin.broker_runtime_info(addr[name]).get("replicaRole") for name in ("broker-a", "broker-a-s")}
    assert roles == {"broker-a": "MASTER", "broker-a-s": "SLAVE"}

    # the controller's view: master 1, and the slave joins the in-sync set
    def group() -> dict | None:
        data = mqadmin_json("-n", namesrv, "getSyncStateSet", "-b", "broker-a")
        assert isinstance(data, dict)
        return data if data["sync_state_set"] == [1, 2] else None

    data = wait_until(group, 30, "broker-a-s in broker-a's sync state set")
    assert (data["master_id"], data["master_addr"]) == (1, addr["broker-a"])

    stop_and_check(launcher, brokers=WITH_SLAVE)


def test_with_slave_a_replica_that_dies_takes_the_cluster_down(tmp_path: Path, launchers: list[Launcher]):
    launcher, _ = start_cluster(launchers, tmp_path / "data", "--with-slave", "--slave-port", "0", brokers=WITH_SLAVE)
    os.kill(launcher.children["broker-a-s"], signal.SIGKILL)
    try:
        code = launcher.proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"launcher still running after broker-a-s died:\n{launcher.output()}") from None
    launcher._reader.join(10)  # type: ignore[attr-defined]
    assert code == 1, launcher.output()
    assert "broker-a-s exited on its own with code -9" in launcher.output()
    assert [name for name, pid in launcher.children.items() if alive(launcher, pid)] == []


def test_with_slave_gives_every_replica_fixed_ports_by_default():
    args = parse_args(["--with-slave"])
    plan = [(p.name, p.broker_name, p.port, p.replica_id, ha_port(p.port) if p.replica_id else None)
            for p in broker_plan(args.broker_ports, args.slave_port)]
    assert plan == [("broker-a", "broker-a", 10911, 1, 10912), ("broker-a-s", "broker-a", 10915, 2, 10916),
                    ("broker-b", "broker-b", 10921, 0, None)]
    assert broker_plan(parse_args([]).broker_ports) == broker_plan((10911, 10921))  # without it: two brokers
    assert [p.name for p in broker_plan((10911, 10921))] == ["broker-a", "broker-b"]


def test_make_run_slave_1_passes_the_flag():
    def recipe(*variables: str) -> str:
        proc = subprocess.run(["make", "--no-print-directory", "-n", "run", *variables], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    assert recipe().endswith("-m cluster.local_cluster --data-dir run-data")
    assert recipe("SLAVE=1").endswith("-m cluster.local_cluster --data-dir run-data --with-slave")


@pytest.mark.parametrize(("args", "says"), [
    (["--slave-port", "10915"], "--slave-port needs --with-slave"),
    (["--with-slave", "--broker-conf", "haListenPort=1"], "haListenPort is set by the launcher with --with-slave"),
    (["--with-slave", "--broker-conf", "controllerAddr=x:1"], "controllerAddr is set by the launcher"),
    (["--with-slave", "--broker-ports", "10911,10912"], "are both 10912"),
    (["--with-slave", "--slave-port", "10911"], "are both 10911"),
    (["--with-slave", "--slave-port", "65535"], "outside 0..65535"),
])
def test_with_slave_refuses_keys_and_ports_the_replicas_need(tmp_path: Path, args: list[str], says: str):
    proc = subprocess.run([sys.executable, "-m", "cluster.local_cluster", "--data-dir", str(tmp_path / "data"),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started
