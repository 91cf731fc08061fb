"""A real S3-protocol server on loopback: moto's standalone server (``python -m moto.server``) as a child
process on a free port, waited on until it answers. Shared by the S3 tier's tests (``tests/s3_server.py``
wraps it in a session fixture) and the benchmarks (``bench/tiered_bench.py``, ``bench/spark_bench.py``);
nothing here needs pytest."""

import contextlib
import importlib.util
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.tiered.provider.s3_file_segment import S3Config, ensure_bucket

ACCESS_KEY, SECRET_KEY, REGION = "testing-access", "testing-secret", "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen

    def config(self, bucket: str | None = None) -> S3Config:
        """A new bucket (created) on this server, or ``bucket``."""
        cfg = S3Config(bucket or f"tier-{uuid.uuid4().hex[:12]}", self.endpoint, REGION, ACCESS_KEY, SECRET_KEY)
        ensure_bucket(cfg)
        return cfg

    def broker_conf(self, bucket: str | None = None) -> dict[str, object]:
        cfg = self.config(bucket)
        return {"tieredBackendServiceProvider": "s3", "tieredStoreS3Endpoint": cfg.endpoint,
                "tieredStoreS3Bucket": cfg.bucket, "tieredStoreS3Region": cfg.region,
                "tieredStoreS3AccessKey": ACCESS_KEY, "tieredStoreS3SecretKey": SECRET_KEY,
                "tieredStoreS3Prefix": "tier"}


def moto_missing() -> str:
    """Why moto's server cannot be started here ("" if it can)."""
    for module in ("moto", "flask", "boto3"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'moto[server]' boto3)"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def s3_server_process(timeout: float = 30.0, https: tuple[Path, Path, Path] | None = None) -> Iterator[S3Server]:
    """``https``: (certificate, key, the CA that signed it): served over https instead of http."""
    tls_args = ["-c", str(https[0]), "-k", str(https[1])] if https else []
    context = ssl.create_default_context(cafile=str(https[2])) if https else None
    for _attempt in range(3):  # the free port may be taken between the probe and moto's bind
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), *tls_args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"{'https' if https else 'http'}://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1, context=context):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            continue
        try:
            yield S3Server(endpoint, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return
    raise RuntimeError("moto's S3 server did not start")
