"""Replication (issue 16): name servers and brokers as real processes, the SDK here, 1 KiB bodies, SDK batches of 64
with ``--window`` batches in flight (as ``bench/cluster_bench.py``'s produce).

- produce, lone master: an ASYNC_MASTER with no slave;
- produce, synchronous slave: a SYNC_MASTER and its SLAVE (every send acknowledged once the slave has it);
  target >= 0.7x the lone master of the same run;
- catch-up of an empty slave: a second slave started on an empty store once the master holds what the produce
  runs wrote; MB/s of commitlog from its ready line (what it held then) to holding the master's end (target >=
  200 MB/s); the note says how much arrived before it was ready.
"""

import time
from pathlib import Path

from bench.cluster_bench import produce_rate
from bench.daemons import Daemon, start_broker, start_namesrv, stop_all, wait_until
from bench.harness import Config, Metric, Recorder, Target
from client import Admin, Producer

TOPIC = "BenchHa"
SEGMENT = 64 * 1024 * 1024

METRICS = [
    Metric("ha.produce_lone", "produce, lone master, SDK batches of 64", "msgs/s", echo="stream", issue=16,
           short="lone master"),
    Metric("ha.produce_sync", "produce, SYNC_MASTER + 1 slave", "msgs/s", echo="stream", vs="ha.produce_lone",
           target=Target(">=", 0.7, of="ha.produce_lone"), issue=16),
    Metric("ha.catch_up", "catch-up of an empty slave over loopback", "MB/s", issue=16,
           target=Target(">=", 200)),
]


def _runtime(ns_addr: str, broker: Daemon) -> dict[str, str]:
    with Admin(ns_addr) as admin:
        return admin.broker_runtime_info(broker.addr)


def _group(workdir: Path, role: str, daemons: list[Daemon]) -> tuple[Daemon, Daemon]:
    ns = start_namesrv(workdir)
    daemons.append(ns)
    master = start_broker(workdir / "master", "broker-a", ns.addr, brokerRole=role, mappedFileSizeCommitLog=SEGMENT,
                          registerNameServerPeriod=1000)
    daemons.insert(0, master)
    with Admin(ns.addr) as admin:
        admin.create_topic(TOPIC, brokers=["broker-a"], read_queue_nums=8, write_queue_nums=8)
        wait_until(lambda: TOPIC in admin.topic_list(), what=f"route of {TOPIC}")
    return ns, master


def _slave(workdir: Path, ns: Daemon, master: Daemon, broker_id: int, daemons: list[Daemon]) -> Daemon:
    slave = start_broker(workdir / f"slave-{broker_id}", "broker-a", ns.addr, brokerId=broker_id, brokerRole="SLAVE",
                         haMasterAddress=_runtime(ns.addr, master)["haServerAddr"], mappedFileSizeCommitLog=SEGMENT,
                         registerNameServerPeriod=1000)
    daemons.insert(0, slave)
    return slave


def scenario(cfg: Config, rec: Recorder) -> None:
    workdir = cfg.workdir / "ha"
    daemons: list[Daemon] = []
    try:
        ns, master = _group(workdir / "lone", "ASYNC_MASTER", daemons)
        with Producer(ns.addr) as producer:
            rec.record("ha.produce_lone", produce_rate(producer, TOPIC, cfg))
        stop_all(daemons)
        daemons.clear()

        ns, master = _group(workdir / "sync", "SYNC_MASTER", daemons)
        _slave(workdir / "sync", ns, master, 1, daemons)
        wait_until(lambda: _runtime(ns.addr, master)["haSlaves"] == "1", what="the slave to connect")
        with Producer(ns.addr) as producer:
            rec.record("ha.produce_sync", produce_rate(producer, TOPIC, cfg))

        end = int(_runtime(ns.addr, master)["commitLogMaxOffset"])
        fresh = _slave(workdir / "sync", ns, master, 2, daemons)
        first = (time.perf_counter(), int(_runtime(ns.addr, fresh)["commitLogMaxOffset"]))  # once it answers
        wait_until(lambda: int(_runtime(ns.addr, fresh)["commitLogMaxOffset"]) >= end, timeout=300, interval=0.01,
                   what="the empty slave to catch up")
        seconds = time.perf_counter() - first[0]
        moved = end - first[1]
        rec.record("ha.catch_up", moved / seconds / 1e6,
                   f"{moved / 1e6:.0f} MB in {seconds:.2f} s after its ready line ({end / 1e6:.0f} MB in all)")
    finally:
        stop_all(daemons)
