"""A real cluster for integration tests: a name server and two brokers on port 0 with temp dirs."""

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, make_cluster

__all__ = ["Cluster", "make_cluster"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("cluster"), registerNameServerPeriod=1000)
    yield c
    c.stop()
