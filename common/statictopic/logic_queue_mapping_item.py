"""One link of a logic queue's chain: a physical queue on one broker, placed in logic offsets."""

from dataclasses import dataclass

NOT_DECIDED = -1
LOGICAL_QUEUE_MOCK_BROKER_NAME = "__logical_queue_broker__"  # the broker name SDK queues of static topics carry
BLOCK_SIZE = 10_000  # logic offsets jump to a multiple of this on remap


@dataclass(slots=True)
class LogicQueueMappingItem:
    gen: int
    queue_id: int  # physical queue id on ``bname``
    bname: str
    logic_offset: int = NOT_DECIDED  # where this link starts in logic terms
    start_offset: int = 0  # physical start
    end_offset: int = NOT_DECIDED  # physical end, exclusive
    time_of_start: int = NOT_DECIDED
    time_of_end: int = NOT_DECIDED

    def logic_offset_decided(self) -> bool:
        return self.logic_offset >= 0

    def end_offset_decided(self) -> bool:
        return self.end_offset >= 0

    def logic_strictly(self, physical: int) -> int:
        """Logic offset of physical offset ``physical`` (clamped below at the start)."""
        assert self.logic_offset_decided(), f"logic offset of {self} is not decided"
        return self.logic_offset if physical < self.start_offset else self.logic_offset + physical - self.start_offset

    def logic_loosely(self, physical: int) -> int:
        """Like :meth:`logic_strictly`, but -1 while undecided and clamped at a decided end."""
        if not self.logic_offset_decided():
            return NOT_DECIDED
        if physical < self.start_offset:
            return self.logic_offset
        if self.end_offset_decided() and physical > self.end_offset:
            return self.logic_offset + self.end_offset - self.start_offset
        return self.logic_offset + physical - self.start_offset

    def physical_of(self, logic: int) -> int:
        return logic - self.logic_offset + self.start_offset

    def offset_delta(self) -> int:
        """Add to a physical queue offset of this item to get the logic offset."""
        return self.logic_offset - self.start_offset

    def max_logic_offset(self) -> int:
        """Logic offset just past this item once its end is decided; its start while open."""
        if self.end_offset_decided():
            return self.logic_offset + self.end_offset - self.start_offset
        return self.logic_offset


def block_round_up(offset: int, block: int = BLOCK_SIZE) -> int:
    """The next block boundary, skipping one more block when ``offset`` is in the upper half of its block, so
    sends still in flight to an old leader cannot reach the new leader's first logic offset."""
    if 2 * (offset % block) < block:  # exactly "offset % block < block / 2", also for odd blocks
        return (offset // block + 1) * block
    return (offset // block + 2) * block
