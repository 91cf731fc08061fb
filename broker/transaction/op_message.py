"""Op messages: what happened to half messages, in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0.

Upstream's op message is tag ``d`` (remove) with the half messages' queue offsets as its body, comma-separated.
Ours says how each ended (``TRAN_OUTCOME``: COMMIT, ROLLBACK or DISCARD), so an end repeated after a restart is
answered as it was decided; and a second kind, tag ``c``, records that those half messages were checked once more
(upstream re-appends the half message with TRANSACTION_CHECK_TIMES raised instead; see ``check_service.py``).
"""

from dataclasses import dataclass
from enum import StrEnum

from common.message import MessageExt
from common.message_properties import PROPERTY_TAGS, encode_properties

PROPERTY_OUTCOME = "TRAN_OUTCOME"
MAX_BODY_OFFSETS = 4096  # half messages one op message names (a body of at most ~80 KiB)


class OpKind(StrEnum):
    REMOVE = "d"  # the half messages ended: committed, rolled back or discarded
    CHECK = "c"  # the half messages were checked (one more check each)


class Outcome(StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"  # checked transactionCheckMax times without an answer: moved to TRANS_CHECK_MAX_TIME_TOPIC


@dataclass(frozen=True, slots=True)
class OpMessage:
    kind: OpKind
    half_offsets: tuple[int, ...]
    outcome: Outcome | None = None  # REMOVE only

    def encode(self) -> tuple[bytes, bytes]:
        """(body, wire properties)."""
        assert self.half_offsets and len(self.half_offsets) <= MAX_BODY_OFFSETS
        assert (self.outcome is not None) == (self.kind is OpKind.REMOVE)
        props = {PROPERTY_TAGS: self.kind.value}
        if self.outcome is not None:
            props[PROPERTY_OUTCOME] = self.outcome.value
        return ",".join(map(str, self.half_offsets)).encode(), encode_properties(props)


def decode_op(msg: MessageExt) -> OpMessage | None:
    """The op message of a record of the op topic; None for one this broker did not write (logged by the caller)."""
    try:
        kind = OpKind(msg.tags or "")
        raw = msg.body.decode("ascii").split(",")
        if not all(r.isdigit() and len(r) <= 18 for r in raw):
            return None
        offsets = tuple(map(int, raw))
        outcome = Outcome(msg.properties[PROPERTY_OUTCOME]) if kind is OpKind.REMOVE else None
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
    return OpMessage(kind, offsets, outcome)
