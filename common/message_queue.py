"""A queue of a topic on a broker: what producers send to and consumers pull from."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"
