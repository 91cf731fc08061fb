"""A message store with the timer store in its dispatch chain and a delivery driven by the test's clock: the timer
tests' node (``nodes`` in conftest.py stops the ones a test started)."""

import shutil
from collections.abc import Callable
from pathlib import Path

from broker.store.message_store import MessageStore
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from broker.timer.delay_router import DelayRouter
from broker.timer.timer_delivery_service import TimerDeliveryService
from broker.timer.timer_message_store import TimerMessageStore, due_of_key
from common.message import MessageExt
from common.message_codec import decode_record
from common.message_properties import encode_properties
from common.timer_topic import TIMER_QUEUE_ID, TIMER_TOPIC
from tests.store.conftest import store_config

NOW = 1_700_000_000_000
ROUTER = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), 259_200_000)


class Node:
    """A message store on ``root/store`` with the timer store in its chain; the delivery is driven by the test
    (``deliver``) with the clock it sets (``now``), unless started."""

    def __init__(self, root: Path, queue_exists: Callable[[str, int], bool] = lambda t, q: True,
                 **overrides: object) -> None:
        # the dispatcher flush service stays quiet unless a test flushes
        self.store = MessageStore(store_config(root / "store", flush_interval_consume_queue_ms=600_000, **overrides))
        self.timers = TimerMessageStore(root / "timer", self.store.commit_log.read_at,
                                        fresh_start=lambda: self.store.flushed_checkpoint.read() or 0)
        self.store.register_dispatcher(self.timers)
        self.store.start()
        self.now = NOW
        self.delivery = TimerDeliveryService(self.timers, self.store, queue_exists, clock_ms=lambda: self.now)
        self._sent = 0

    def send(self, dues: list[int], topic: str = "Real", queue_id: int = 1,
             properties: dict[str, str] | None = None) -> list[int]:
        """Timer records as the send path writes them, one per due time (``properties``: more of the sender's);
        their commitlog offsets."""
        bodies = [b"m%d" % (self._sent + i) for i in range(len(dues))]
        props = [ROUTER.timer_properties(encode_properties({"UNIQ_KEY": body.decode(), "DELAY": "1",
                                                            **(properties or {})}), topic, queue_id, due)
                 for body, due in zip(bodies, dues, strict=True)]
        self._sent += len(dues)
        result = self.store.put_messages(TIMER_TOPIC, TIMER_QUEUE_ID, bodies, props, born_timestamp=NOW - 5,
                                         born_host="10.1.2.3:99", flag=5)
        assert result.ok and self.store.wait_dispatched(result.append.end_offset)
        return result.append.physical_offsets

    def deliver(self) -> int:
        return self.delivery.deliver_due()

    def delivered(self, topic: str = "Real", queue_id: int = 1) -> list[MessageExt]:
        self.store.wait_dispatched(self.store.commit_log.max_offset())
        got = self.store.get_message(topic, queue_id, 0, 10_000)
        return [decode_record(r) for r in got.messages]

    def pending_dues(self) -> list[int]:
        return [due_of_key(k) for k, _ in self.timers.take_due(1 << 55, 1 << 20)]

    def stop(self) -> None:
        self.delivery.shutdown()
        self.store.shutdown()
        self.timers.close()


def start(nodes: list[Node], root: Path, **kw) -> Node:
    node = Node(root, **kw)
    nodes.append(node)
    return node


def bodies(msgs: list[MessageExt]) -> list[bytes]:
    return [m.body for m in msgs]


def replayed_whole(nodes: list[Node], root: Path) -> Node:
    """A node on ``root``'s commitlog with a new timer store and consume queue, which replay it from its start (as a
    slave's do what they copy from their master); stopped by the ``nodes`` fixture."""
    for rebuilt in ("store/consumequeue", "timer"):
        shutil.rmtree(root / rebuilt)
    (root / "store" / "checkpoint" / "commitlog_flushed").unlink()
    return start(nodes, root)
