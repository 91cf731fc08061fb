"""A delayed message's recall handle: what its send answers so that the producer can take the message back before
it is due (``RecallMessage``). It names the broker holding the timer, the timer itself - the due time and the
commitlog offset of its timer-topic record, the timer store's key - and the message id, which that broker checks
against the stored message. Plain text, ``r1|broker|due_ms|offset|message_id`` (the id last: it is the producer's
own string); the SDK and the proxy read the broker name out of it to route a recall."""

from typing import NamedTuple

PREFIX = "r1"
SEPARATOR = "|"
MAX_MESSAGE_ID_CHARS = 128  # a longer unique key is named by the offset id instead (broker/timer/timer_recall.py)
MAX_HANDLE_CHARS = 512


class InvalidRecallHandle(ValueError):
    pass


class RecallHandle(NamedTuple):
    broker_name: str
    due_ms: int
    physical_offset: int  # of the timer-topic record
    message_id: str

    def encode(self) -> str:
        return SEPARATOR.join((PREFIX, self.broker_name, str(self.due_ms), str(self.physical_offset),
                               self.message_id))

    @classmethod
    def decode(cls, text: str) -> "RecallHandle":
        parts = text.split(SEPARATOR, 4)
        if (len(parts) != 5 or parts[0] != PREFIX or not parts[1] or not parts[4] or len(text) > MAX_HANDLE_CHARS
                or not text.isascii()):
            raise InvalidRecallHandle(f"recall handle {text[:80]!r} is not one this cluster issued")
        due, offset = parts[2], parts[3]
        if not (due.isdigit() and offset.isdigit() and len(due) <= 18 and len(offset) <= 18):
            raise InvalidRecallHandle(f"recall handle {text[:80]!r} has a due time or offset that is not a number")
        return cls(parts[1], int(due), int(offset), parts[4])
