"""A real cluster for integration tests: a name server and two brokers on port 0 with temp dirs.

Every test here runs in both store types (``storeType=default`` and ``defaultRocksDB``)."""

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, make_cluster

__all__ = ["Cluster", "make_cluster"]

STORE_TYPES = ("default", "defaultRocksDB")


@pytest.fixture(scope="module", params=STORE_TYPES)
def store_type(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, store_type: str) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("cluster"), registerNameServerPeriod=1000, storeType=store_type)
    yield c
    c.stop()
