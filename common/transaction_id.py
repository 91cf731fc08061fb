"""A transaction's id: which broker holds its half message, and where (its commitlog offset and its offset in the
half queue). Plain text, ``tx1|broker|commit_log_offset|queue_offset``: the SDK and a stateless proxy read the
broker name out of it to route EndTransaction to that broker's master, which finds the half message by offset.

The id stays the same for every check of a transaction (the half message is never rewritten), so an end from
the producer and an answer to a check name the same half message."""

from dataclasses import dataclass

PREFIX = "tx1"
SEPARATOR = "|"


class InvalidTransactionId(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TransactionId:
    broker_name: str
    commit_log_offset: int
    queue_offset: int

    def encode(self) -> str:
        return SEPARATOR.join((PREFIX, self.broker_name, str(self.commit_log_offset), str(self.queue_offset)))

    @classmethod
    def decode(cls, text: str) -> "TransactionId":
        parts = text.split(SEPARATOR)
        if len(parts) != 4 or parts[0] != PREFIX or not parts[1]:
            raise InvalidTransactionId(f"transaction id {text[:80]!r} is not one this cluster issued")
        raw_offsets = parts[2:]
        if not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in raw_offsets):
            raise InvalidTransactionId(f"transaction id {text[:80]!r} has an offset that is not a number")
        return cls(parts[1], int(raw_offsets[0]), int(raw_offsets[1]))

    def __str__(self) -> str:
        return self.encode()
