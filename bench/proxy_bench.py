"""mqproxy (issue 17): a name server, one broker (ASYNC_FLUSH) and mqproxy as real processes; produce measured two
ways in the same run, single async sends of 1 KiB with ``--window`` in flight from one thread:

- our SDK here, ``Producer.send_async`` straight to the broker (``bench/cluster_bench.py``'s ``produce_rate``);
- the official RocketMQ 5 Python client (``rocketmq-python-client``) in a subprocess of its own venv, its
  ``Producer.send_async`` through mqproxy (v2 gRPC; the proxy sends on with our SDK):
  ``bench/official_client/produce_rate.py``. Target: >= 0.5x the SDK's rate;
- the same client against a proxy whose sends answer at once, storing nothing
  (``bench/official_client/answering_proxy.py``): the client's own ceiling on this machine, with only a proxy's
  gRPC front end in the way. No proxy can take the client past it, so the row shows how much of the gap to the
  target is the client's.

The client's venv is the proxy tests' (``cluster/official_client.py``): reused when present, else made here by pip
(not in smoke mode, which must stay short). When it cannot be had, the client's row is "not run" with the reason.
"""

import json
import subprocess
import sys
from pathlib import Path

from bench.cluster_bench import produce_rate
from bench.daemons import start_broker, start_namesrv, start_proxy, stop_all, wait_until
from bench.harness import BODY, Config, Metric, Recorder, Target
from client import Admin, Producer
from cluster.daemon_process import Daemon, start_daemon
from cluster.official_client import (
    CLIENT_REQUIREMENT,
    ClientInstallError,
    client_env,
    install_client,
    installed_python,
)

BROKER = "broker-proxy"
TOPIC = "BenchProxy"
QUEUES = 8
SCRIPT = Path(__file__).resolve().parent / "official_client" / "produce_rate.py"
CLIENT_START_S = 60  # the client's start-up (routes, settings over Telemetry) and shutdown, beyond its measurement

METRICS = [
    Metric("proxy.sdk_direct", "produce 1 KiB, our SDK direct to the broker, single async sends", "msgs/s",
           echo="unary", issue=17, short="SDK direct"),
    Metric("proxy.official", "produce 1 KiB, official Python client via mqproxy, single async sends", "msgs/s",
           echo="unary", vs="proxy.sdk_direct", target=Target(">=", 0.5, of="proxy.sdk_direct"), issue=17),
    Metric("proxy.official_ceiling", "the same client, a proxy answering sends at once (stores nothing)", "msgs/s",
           echo="unary", vs="proxy.sdk_direct", issue=17),
]


def _client_python(cfg: Config) -> tuple[Path | None, str]:
    """The official client's interpreter, or None and why not."""
    python = installed_python()
    if python is not None:
        return python, ""
    if cfg.smoke:
        return None, f"{CLIENT_REQUIREMENT} not installed (smoke mode does not install it; a quick run does)"
    print(f"[proxy] installing {CLIENT_REQUIREMENT} into its venv", file=sys.stderr, flush=True)
    try:
        return install_client(), ""
    except ClientInstallError as exc:  # what failed, and pip's last word on why
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return None, " ".join(dict.fromkeys([lines[0], lines[-1]]))[:240] if lines else repr(exc)


def _official_rate(python: Path, endpoint: str, cfg: Config, workdir: Path) -> tuple[float, str]:
    home = workdir / "official-client-home"
    home.mkdir(parents=True, exist_ok=True)
    cmd = [str(python), str(SCRIPT), endpoint, TOPIC, "--window", str(cfg.window), "--seconds", str(cfg.seconds),
           "--warmup", str(cfg.warmup), "--size", str(len(BODY))]
    proc = subprocess.run(cmd, cwd=home, env=client_env(home), capture_output=True, text=True,
                          timeout=cfg.warmup + cfg.seconds + CLIENT_START_S, stdin=subprocess.DEVNULL)
    lines = [json.loads(line[3:]) for line in proc.stdout.splitlines() if line.startswith("@@ ")]
    result = next((line for line in lines if "rate" in line), None)
    if proc.returncode != 0 or result is None or not lines[-1].get("done"):
        raise RuntimeError(f"the official client's run exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-2000:]}")
    note = f"{result['sent']:,} sent"
    if result["failed"]:
        failure = next((line["error"] for line in lines if line.get("event") == "send-failed"), "")
        note += f", {result['failed']:,} failed ({failure[:120]})"
    return float(result["rate"]), note


def _start_answering_proxy(workdir: Path, namesrv_addr: str) -> Daemon:
    return start_daemon("answering-proxy", "bench.official_client.answering_proxy",
                        ["-n", namesrv_addr, "--host", "127.0.0.1", "-p", "0"], workdir / "answering-proxy")


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "proxy"
    python, why_not = _client_python(cfg)  # before the daemons: an install takes a while
    ns = start_namesrv(workdir)
    daemons = [ns]
    try:
        daemons.insert(0, start_broker(workdir, BROKER, ns.addr, registerNameServerPeriod=1000))
        with Admin(ns.addr) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
        proxy = start_proxy(workdir, ns.addr)
        daemons.insert(0, proxy)
        note = f"window {cfg.window}"
        with Producer(ns.addr) as producer:
            rec.record("proxy.sdk_direct", produce_rate(producer, TOPIC, cfg, batch=1), note)
        if python is None:
            rec.skip("proxy.official", why_not)
            rec.skip("proxy.official_ceiling", why_not)
            return
        rate, sent = _official_rate(python, proxy.addr, cfg, workdir)
        rec.record("proxy.official", rate, f"{note}, {sent}")
        proxy.stop()
        answering = _start_answering_proxy(workdir, ns.addr)
        daemons.insert(0, answering)
        rate, sent = _official_rate(python, answering.addr, cfg, workdir)
        rec.record("proxy.official_ceiling", rate, f"{note}, {sent}")
    finally:
        stop_all(daemons)
