"""The broker's timer, wired: the router sends ask, the store in the commitlog's dispatch chain (registered before
the message store starts, so recovery replays into it), and the delivery thread (started once the store is up)."""

from collections.abc import Sequence
from pathlib import Path

from broker.store.message_store import MessageStore
from broker.timer.delay_router import DelayRouter
from broker.timer.delivery_route import DeliveryRoute
from broker.timer.timer_delivery_service import QueueExists, TimerDeliveryService, TopicConfigured
from broker.timer.timer_message_store import TimerMessageStore


class TimerService:
    def __init__(self, root: Path, level_delays_ms: Sequence[int], max_delay_ms: int) -> None:
        self.root = root  # <storePathRootDir>/timer
        self.router = DelayRouter(level_delays_ms, max_delay_ms)
        self.store: TimerMessageStore | None = None
        self.delivery: TimerDeliveryService | None = None

    def attach(self, store: MessageStore) -> None:
        """Before ``store.start()``."""
        # A new timer store starts where the commitlog is known to be whole: nothing before it holds a timer.
        self.store = TimerMessageStore(self.root, store.commit_log.read_at,
                                       fresh_start=lambda: store.flushed_checkpoint.read() or 0)
        store.register_dispatcher(self.store)

    def start(self, store: MessageStore, queue_exists: QueueExists, route: DeliveryRoute,
              topic_configured: TopicConfigured | None = None) -> None:
        """After ``store.start()``: timers due while the broker was down are delivered at once."""
        assert self.store is not None, "attach before start"
        self.delivery = TimerDeliveryService(self.store, store, queue_exists, topic_configured=topic_configured,
                                             route=route, router=self.router)
        self.delivery.start()

    def stop_delivery(self) -> None:
        """Before the message store shuts down: no put after it."""
        if self.delivery is not None:
            self.delivery.shutdown()

    def close(self) -> None:
        """After the message store shut down: its last dispatch and flush went into the timer store."""
        if self.store is not None:
            self.store.close()

    def runtime_info(self) -> dict[str, str]:
        """What ``GetBrokerRuntimeInfo`` shows of the timer."""
        delivery = self.delivery
        return {
            "timerPending": str(self.store.pending if self.store is not None else 0),
            "timerDelivered": str(delivery.delivered if delivery is not None else 0),
            "timerDropped": str(delivery.dropped if delivery is not None else 0),
            "timerMaxDelaySec": str(self.router.max_delay_ms // 1000),
            "timerDelayLevels": str(self.router.max_level),
        }
