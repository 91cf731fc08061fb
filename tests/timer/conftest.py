from collections.abc import Iterator

import pytest

from tests.timer.timer_node import Node


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()
