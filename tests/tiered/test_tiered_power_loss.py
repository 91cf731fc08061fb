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


def lost_tail(nodes, provider: TieredBackendServiceProvider) -> Node:
    """8 records of queue 1 kept, 8 of queue 0, then 8 of queue 1 the tier has and the power loss took; restarted,
    the tier's cut not yet made (the upload thread's first step, which a failing backend may hold up)."""
    node = nodes(provider)
    for i in range(8):
        node.put(1, b"early-%d" % i)
    for i in range(8):
        node.put(0, b"other-%d" % i)
    lost_from = min(node.put(1, b"LOST-%d" % i)[1] for i in range(8))
    assert node.dispatcher.upload_due(force=True) == 24
    node.dispatcher.flush()
    lose_power(node, lost_from)
    return nodes(provider)


def test_a_tier_cut_after_a_power_loss_stays_cut_through_a_second_crash(nodes, provider: TieredBackendServiceProvider):
    """The restart cut the queue's tiered consume queue in its records only; the object kept the units. Traffic on
    another queue took the commitlog past the stored uploaded end (so the next start reconciles nothing), and after
    a second crash the load took the object's size back: the lost records were served again, and the queue's next
    messages, at offsets the tier said it held, were never uploaded (reads served the lost ones in their place)."""
    node = lost_tail(nodes, provider)
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


def test_sends_taken_before_the_tier_is_cut_do_not_make_the_cut_fall_short(nodes,
                                                                           provider: TieredBackendServiceProvider):
    """The cut went to each queue's end when it ran, not as recovery left it: messages sent to the queue meanwhile
    (the broker serves before the cut; a backend failing at start holds the cut up) counted as the queue's, and the
    tier kept the lost records in their place."""
    node = lost_tail(nodes, provider)
    for i in range(3):
        node.put(1, b"new-%d" % i)
    node.tiered._prepare_own()
    assert node.tiered.flat_files.get(TOPIC, 1).max_offset == 8
    assert node.dispatcher.upload_due(force=True) == 3
    assert bodies(node, 1) == [b"early-%d" % i for i in range(8)] + [b"new-%d" % i for i in range(3)]


def test_a_cut_a_crash_came_before_is_made_at_the_next_start(nodes, provider: TieredBackendServiceProvider):
    """The cut was due only while the commitlog ended below the uploaded end: sends before a second crash took it
    past, and the next start cut nothing. And the upload checkpoint, lowered to the recovered end in memory only,
    stayed stored above it: the next start replayed from there, inside a record the new sends wrote, and the store
    fail-stopped at every start ("no record at commitlog offset 2536")."""
    node = lost_tail(nodes, provider)
    for i in range(64):  # queue 0: the commitlog goes past the uploaded end
        node.put(0, b"more-%02d" % i + b"m" * 64)
    node.stop(upload=False)  # crashed before the upload thread's first step
    (node.root / ABORT_FILE).touch()
    node = nodes(provider)
    node.tiered._prepare_own()
    assert node.tiered.flat_files.get(TOPIC, 1).max_offset == 8  # was 16
    assert node.tiered.metadata.get_reconcile_end() is None
    node.put(1, b"new-0")
    node.dispatcher.upload_due(force=True)
    assert bodies(node, 1) == [b"early-%d" % i for i in range(8)] + [b"new-0"]
