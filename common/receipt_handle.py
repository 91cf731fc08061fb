"""A POP delivery's receipt handle: which broker, queue and offset it is, and which delivery of that message
(``delivery``: a sequence the broker raises every time it hands the message out or changes its invisible time),
so a handle of an earlier delivery is refused. Plain text, ``v1|broker|queue_id|offset|delivery|until|retries``:
the SDK and the proxy read the broker name out of it to route an ack."""

from typing import NamedTuple

PREFIX = "v1"
MAX_ACK_HANDLES = 1024  # receipt handles one ack request may carry
SEPARATOR = "|"


class InvalidReceiptHandle(ValueError):
    pass


class ReceiptHandle(NamedTuple):  # a tuple: built and taken apart for every message a pop hands out and acks
    broker_name: str
    queue_id: int
    queue_offset: int  # the physical queue's offset (a static topic's too: the broker keeps it in flight there)
    delivery: int
    invisible_until_ms: int
    reconsume_times: int

    def encode(self) -> str:
        return SEPARATOR.join((PREFIX, self.broker_name, str(self.queue_id), str(self.queue_offset),
                               str(self.delivery), str(self.invisible_until_ms), str(self.reconsume_times)))

    @classmethod
    def decode(cls, text: str) -> "ReceiptHandle":
        # An ack decodes every handle of a receive (32 at a time): one split, tuple.__new__ past NamedTuple's
        # keyword machinery; what is checked is unchanged.
        parts = text.split(SEPARATOR)
        if len(parts) != 7 or parts[0] != PREFIX or not parts[1] or not text.isascii():  # broker names are ASCII
            raise InvalidReceiptHandle(f"receipt handle {text[:80]!r} is not one this cluster issued")
        try:
            queue_id, offset, delivery, until, retries = int(parts[2]), int(parts[3]), int(parts[4]), \
                int(parts[5]), int(parts[6])
        except ValueError:
            raise InvalidReceiptHandle(f"receipt handle {text[:80]!r} has a field that is not a number") from None
        if queue_id < 0 or offset < 0 or delivery < 0 or until < 0 or retries < 0:
            raise InvalidReceiptHandle(f"receipt handle {text[:80]!r} has a negative field")
        return _new(cls, (parts[1], queue_id, offset, delivery, until, retries))


_new = tuple.__new__
