"""A real S3-protocol server for the S3 tier's tests: moto's standalone server (``python -m moto.server``) as a
child process on loopback, on a free port, waited on until it answers (``cluster/s3_server.py``, shared with
the benchmarks). One per test session (module fixture ``s3_server``); each test takes its own bucket."""

from collections.abc import Iterator

import pytest

from cluster.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, s3_server_process

__all__ = ["ACCESS_KEY", "REGION", "SECRET_KEY", "S3Server", "s3_server", "s3_server_process"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with s3_server_process() as server:
        yield server
