"""A subscription group's (consumer group's) settings on this broker."""

from dataclasses import dataclass


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    # FIFO (upstream's consumeMessageOrderly): POP hands out a message group's next message only once the one
    # before it is acked or dead-lettered
    consume_message_orderly: bool = False
