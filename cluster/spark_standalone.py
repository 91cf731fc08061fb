"""A Spark standalone cluster on loopback from the installed PySpark's own launcher: a master and N workers, each
``<pyspark>/bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`` as a child process in its own
process group (the pip package ships ``spark-class`` but not ``sbin/start-master.sh``). Ports are chosen by the
JVMs (``0``) and read back from their log lines, which a reader thread per process copies to ``<workdir>/*.log``
and matches; waits are on those lines with a deadline.

Workers run 1 core and little memory each, and start their executors' Python workers with this interpreter and
the repository importable. The jobs reach the cluster with ``--master <url>`` and :meth:`StandaloneCluster.env`
(a ``SPARK_CONF_DIR`` whose ``spark-defaults.conf`` sizes executors to fit the workers, loopback addresses).
Executors share no tier directory with anyone: run the jobs against an s3 tier.

``python -m cluster.spark_standalone [--workers 2]`` starts one and prints its URLs until Ctrl-C."""

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
MASTER_READY = re.compile(r"I have been elected leader! New state: ALIVE")
WORKER_UI = re.compile(r"Successfully started service 'WorkerUI' on port (\d+)")
WORKER_READY = re.compile(r"Successfully registered with master (spark://\S+)")


class SparkClusterError(RuntimeError):
    """A master or worker did not start; the message names it and quotes its log's tail."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class LoggedProcess:
    """A ``spark-class`` JVM in its own process group; a thread copies its output to a log file and keeps the
    lines, so :meth:`wait_for` waits on a pattern (a condition variable, no polling)."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=log.parent)
        self._thread = threading.Thread(target=self._pump, name=f"spark-{name}-log", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log, "wb") as out:
            for raw in self.proc.stdout:
                out.write(raw)
                out.flush()
                with self._cond:
                    self._lines.append(raw.decode(errors="replace").rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pattern: re.Pattern[str], deadline: float) -> re.Match[str]:
        """The first line matching ``pattern``; SparkClusterError if the process ends or the deadline passes."""
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if match := pattern.search(line):
                        return match
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    why = f"exited {self.proc.poll()}" if self._eof else "timed out"
                    tail = "\n".join(self._lines[-20:])
                    raise SparkClusterError(f"spark {self.name} {why} before /{pattern.pattern}/ "
                                            f"(log {self.log}):\n{tail}")
                self._cond.wait(left)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group (the JVM's shutdown hooks stop a worker's executors), SIGKILL after
        ``timeout``; the group is gone when this returns."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # stragglers of the group (an executor mid-launch)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._thread.join(timeout=10)


@dataclass
class StandaloneCluster:
    workdir: Path
    master_url: str = ""
    master_ui: str = ""
    worker_uis: list[str] = field(default_factory=list)
    conf_dir: Path = field(init=False)
    processes: list[LoggedProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.conf_dir = self.workdir / "conf"

    @property
    def spark_conf(self) -> dict[str, str]:
        """What a driver of this cluster sets (written to ``spark-defaults.conf`` for ``python -m`` jobs; an
        in-process session passes it to its builder): executors that fit a worker, everything on loopback."""
        return {
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.driver.memory": "512m",
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.executorEnv.PYTHONPATH": python_path(),
        }

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a job run against this cluster (``python -m spark_jobs.X --master <url>``)."""
        return {**(os.environ if base is None else base), "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable}

    def stop(self) -> None:
        for proc in reversed(self.processes):  # workers (and their executors) first, then the master
            proc.stop()
        self.processes.clear()


def python_path() -> str:
    return os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH", "")])])


def _daemon_env(cluster: StandaloneCluster) -> dict[str, str]:
    env = cluster.env()
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": "256m", "PYTHONPATH": python_path(),
                "SPARK_NO_DAEMONIZE": "1"})
    return env


@contextlib.contextmanager
def standalone_cluster(workdir: Path, workers: int = 2, cores: int = 1, memory: str = "512m",
                       timeout: float = 90.0) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers on loopback, each ready (master ALIVE, every worker registered) when
    this yields; all stopped (process groups killed) on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = StandaloneCluster(workdir)
    cluster.conf_dir.mkdir(exist_ok=True)
    (cluster.conf_dir / "spark-defaults.conf").write_text(
        "".join(f"{k} {v}\n" for k, v in cluster.spark_conf.items()))
    env = _daemon_env(cluster)
    spark_class = str(spark_home() / "bin" / "spark-class")
    deadline = time.monotonic() + timeout
    try:
        master = LoggedProcess("master", [spark_class, MASTER_CLASS, "--host", LOOPBACK, "--port", "0",
                                          "--webui-port", "0"], env, workdir / "master.log")
        cluster.processes.append(master)
        cluster.master_url = master.wait_for(MASTER_URL, deadline).group(1)
        cluster.master_ui = f"http://{LOOPBACK}:{master.wait_for(MASTER_UI, deadline).group(1)}"
        master.wait_for(MASTER_READY, deadline)
        started = []
        for i in range(workers):
            work = workdir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            started.append(LoggedProcess(
                f"worker-{i}", [spark_class, WORKER_CLASS, "--host", LOOPBACK, "--cores", str(cores), "--memory",
                                memory, "--webui-port", "0", "--work-dir", str(work), cluster.master_url],
                env, workdir / f"worker-{i}.log"))
            cluster.processes.append(started[-1])
        for worker in started:  # they start in parallel; each must register
            worker.wait_for(WORKER_READY, deadline)
            cluster.worker_uis.append(f"http://{LOOPBACK}:{worker.wait_for(WORKER_UI, deadline).group(1)}")
        yield cluster
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster.spark_standalone", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default="spark-standalone", help="logs, work and conf directories")
    args = parser.parse_args(argv)
    with standalone_cluster(Path(args.workdir).resolve(), args.workers) as cluster:
        print(f"master {cluster.master_url} ui {cluster.master_ui} workers {' '.join(cluster.worker_uis)}")
        print(f"jobs: SPARK_CONF_DIR={cluster.conf_dir} SPARK_LOCAL_IP={LOOPBACK} python -m spark_jobs.compact "
              f"--master {cluster.master_url} ...", flush=True)
        signals = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        signal.sigwait(signals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
