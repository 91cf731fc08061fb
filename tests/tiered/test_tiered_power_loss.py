"""The tier after an OS crash under ASYNC_FLUSH (the local commitlog lost a tail the tier had uploaded), and after a
second crash: in process, on the wiring of ``test_tiered_unit_dispatcher_fetcher`` (the upload thread not started)."""

from pathlib import Path

import pytest

from broker.store.recovery import ABORT_FILE
from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from common.message_codec import decode_record
from tests.tiered.test_tiered_unit_dispatcher_fetcher import TOPIC, Node, tier_matches_local


@pytest.fixture(params=[TieredBackendServiceProvider.POSIX, TieredBackendServiceProvider.MEMORY])
def provider(request: pytest.FixtureRequest) -> TieredBackendServiceProvider:
    return request.param


@pytest.fixture
def nodes(tmp_path: Path):
    opened: list[Node] = []

    def start(provider: TieredBackendServiceProvider) -> Node:
        node = Node(tmp_path / "store", provider)
        opened.append(node)
        return node

    yield start
    for node in opened:
        node.stop()


def lose_power(node: Node, from_offset: int) -> None:
    """The process died (nothing more uploaded) and the page cache with it: the commitlog on disk ends at
    ``from_offset`` (zeros after it) and the next start is an abnormal one."""
    node.stop(upload=False)
    [segment] = sorted((node.root / "commitlog").iterdir())  # one local segment holds every record here
    with open(segment, "r+b") as f:
        f.seek(from_offset)
        f.write(bytes(segment.stat().st_size - from_offset))
    (node.root / ABORT_FILE).touch()


def bodies(node: Node, queue_id: int) -> list[bytes]:
    flat = node.tiered.flat_files.get(TOPIC, queue_id)
    assert flat is not None
    return [decode_record(r).body for r in flat.messages(flat.min_offset, 64, 1 << 20, None)[0]]


def test_a_tier_cut_after_a_power_loss_stays_cut_through_a_second_crash(nodes, provider: TieredBackendServiceProvider):
    """The restart cut the queue's tiered consume queue in its records only; the object kept the units. Traffic on
    another queue took the commitlog past the stored uploaded end (so the next start reconciles nothing), and after
    a second crash the load took the object's size back: the lost records were served again, and the queue's next
    messages, at offsets the tier said it held, were never uploaded (reads served the lost ones in their place)."""
    node = nodes(provider)
    for i in range(8):
        node.put(1, b"early-%d" % i)
    for i in range(8):
        node.put(0, b"other-%d" % i)
    lost_from = min(node.put(1, b"LOST-%d" % i)[1] for i in range(8))
    assert node.dispatcher.upload_due(force=True) == 24
    node.dispatcher.flush()
    lose_power(node, lost_from)

    node = nodes(provider)
    node.tiered._prepare_own()  # what the upload thread does first: the tier forgets the lost records
    assert node.tiered.flat_files.get(TOPIC, 1).max_offset == node.local.max_offset(TOPIC, 1) == 8
    for i in range(32):  # queue 0 only: the commitlog goes past where the lost records ended
        node.put(0, b"more-%02d" % i + b"m" * 64)
    assert node.dispatcher.upload_due(force=True) == 32
    node.dispatcher.flush()
    node.stop(upload=False)
    (node.root / ABORT_FILE).touch()  # any crash: nothing lost locally this time

    node = nodes(provider)
    node.tiered._prepare_own()
    assert node.tiered.flat_files.get(TOPIC, 1).max_offset == 8  # was 16: the object's units taken back
    for i in range(8):
        node.put(1, b"new-%d" % i)
    assert node.dispatcher.upload_due(force=True) == 8
    assert tier_matches_local(node, 1) == 16
    assert bodies(node, 1) == [b"early-%d" % i for i in range(8)] + [b"new-%d" % i for i in range(8)]
