"""Topic configuration: what a broker serves for a topic."""

from dataclasses import dataclass, field

from common.perm import PERM_INHERIT, PERM_READ_WRITE

# RocketMQ's default topic: a broker with autoCreateTopicEnable serves it, and producers use its route
# for a topic the name server does not know yet (the broker then creates that topic on first send).
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
DEFAULT_TOPIC_PERM = PERM_READ_WRITE | PERM_INHERIT
MAX_QUEUE_NUMS = 1024  # read or write queues of a topic on one broker


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = PERM_READ_WRITE
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        from common.topic_validator import validate_topic

        validate_topic(self.topic_name)
        if not 1 <= self.write_queue_nums <= MAX_QUEUE_NUMS or not 1 <= self.read_queue_nums <= MAX_QUEUE_NUMS:
            raise ValueError(f"queue numbers must be 1..{MAX_QUEUE_NUMS} (read {self.read_queue_nums}, "
                             f"write {self.write_queue_nums})")
        if self.perm & ~0xF:
            raise ValueError(f"perm {self.perm} has unknown bits")
