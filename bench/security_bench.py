"""Security (issue 18): produce with the security features on vs the same run with them off. A name server and one
broker (ASYNC_FLUSH) as real processes per variant, the SDK here; 1 KiB messages, batches of 64 and single sends,
``--window`` calls in flight (``bench/cluster_bench.py``'s measurement).

- plain: TLS off (the reference);
- tls: every port TLS only (a CA and a certificate for 127.0.0.1 made for the run, ``cluster/tls_certs.py``), the
  broker registering over TLS, the SDK given the CA. Target: >= 0.8x plain;
- acl_tls: TLS, and authentication and authorization on (the SDK signs as the super user). Target: >= 0.8x plain.

Variants run in alternating rounds (plain, tls, plain, tls, ...; each round a fresh cluster) and each row keeps
its best round, so a slow moment of the machine does not land on one side only. ``VARIANTS`` is the table to
extend (namesrv flags, broker.conf keys and client keyword arguments per variant).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster_bench import produce_rate
from bench.daemons import Daemon, start_broker, start_daemon, stop_all, wait_until
from bench.harness import Config, Metric, Recorder, Target
from client import Admin, Producer

BROKER = "broker-security"
TOPIC = "BenchSecurity"
QUEUES = 8
ROUNDS = {"smoke": 1, "quick": 2, "full": 3}


@dataclass
class Setup:
    namesrv_args: list[str] = field(default_factory=list)
    broker_conf: dict[str, object] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)  # keyword arguments of every SDK client


def _plain(_workdir: Path) -> Setup:
    return Setup()


def _tls(workdir: Path) -> Setup:
    from cluster.tls_certs import make_tls_files

    files = make_tls_files(workdir / "certs", name="bench")
    return Setup(["--tls-enable", "--tls-cert", str(files.cert), "--tls-key", str(files.key)],
                 {"tlsEnable": "true", "tlsServerCertPath": files.cert, "tlsServerKeyPath": files.key,
                  "tlsClientCaPath": files.ca},
                 {"tls_ca": str(files.ca)})


def _acl_tls(workdir: Path) -> Setup:
    """TLS as above, and authentication and authorization on: the super user signs every call (each request's
    signature checked, each send's Pub permission looked up)."""
    tls = _tls(workdir)
    root = json.dumps({"username": "root", "password": "root-secret"})
    inner = json.dumps({"accessKey": "inner-ak", "secretKey": "inner-secret"})
    acl = {"authenticationEnabled": "true", "authorizationEnabled": "true", "initAuthenticationUser": root,
           "innerClientAuthenticationCredentials": inner}
    return Setup([*tls.namesrv_args, "--authentication-enabled", "--inner-client-authentication-credentials", inner,
                  "--init-authentication-user", root], {**tls.broker_conf, **acl},
                 {**tls.client, "credentials": ("root", "root-secret")})


VARIANTS: dict[str, Callable[[Path], Setup]] = {"plain": _plain, "tls": _tls, "acl_tls": _acl_tls}

METRICS = [
    Metric("security.produce_plain", "produce, batches of 64, TLS off", "msgs/s", echo="batch", issue=18,
           short="off"),
    Metric("security.produce_tls", "produce, batches of 64, TLS on", "msgs/s", echo="batch",
           vs="security.produce_plain", target=Target(">=", 0.8, of="security.produce_plain"), issue=18),
    Metric("security.produce_acl_tls", "produce, batches of 64, ACL and TLS on", "msgs/s", echo="batch",
           vs="security.produce_plain", target=Target(">=", 0.8, of="security.produce_plain"), issue=18),
    Metric("security.send_plain", "produce, single sends, TLS off", "msgs/s", echo="unary", issue=18, short="off"),
    Metric("security.send_tls", "produce, single sends, TLS on", "msgs/s", echo="unary", vs="security.send_plain",
           target=Target(">=", 0.8, of="security.send_plain"), issue=18),
    Metric("security.send_acl_tls", "produce, single sends, ACL and TLS on", "msgs/s", echo="unary",
           vs="security.send_plain", target=Target(">=", 0.8, of="security.send_plain"), issue=18),
]


def _run_variant(cfg: Config, name: str, workdir: Path) -> tuple[float, float]:
    setup = VARIANTS[name](workdir)
    daemons: list[Daemon] = []
    try:
        ns = start_daemon("namesrv", "namesrv.main", ["--host", "127.0.0.1", "-p", "0", *setup.namesrv_args],
                          workdir / "namesrv")
        daemons.append(ns)
        conf: dict[str, object] = {"registerNameServerPeriod": 1000, **setup.broker_conf}
        daemons.insert(0, start_broker(workdir, BROKER, ns.addr, None, **conf))
        with Admin(ns.addr, **setup.client) as admin:
            admin.create_topic(TOPIC, brokers=[BROKER], read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
        with Producer(ns.addr, group="bench-security", **setup.client) as producer:
            return produce_rate(producer, TOPIC, cfg), produce_rate(producer, TOPIC, cfg, batch=1)
    finally:
        stop_all(daemons)


def scenario(cfg: Config, rec: Recorder) -> None:
    best: dict[str, tuple[float, float]] = {}
    for round_no in range(ROUNDS[cfg.mode]):
        for name in VARIANTS:
            batch, single = _run_variant(cfg, name, cfg.workdir / "security" / f"{name}-{round_no}")
            prev = best.get(name, (0.0, 0.0))
            best[name] = (max(prev[0], batch), max(prev[1], single))
    note = f"best of {ROUNDS[cfg.mode]} alternating rounds"
    for name, (batch, single) in best.items():
        if f"security.produce_{name}" in {m.id for m in METRICS}:
            rec.record(f"security.produce_{name}", batch, note)
            rec.record(f"security.send_{name}", single, note)
