"""The status of one physical queue of a logic queue, as seed 004 names it.

- Normal: the leader item, the only writable one.
- ReadOnly: an older item whose physical queue still holds readable data (or whose end is not decided yet: a
  remap in progress fenced it a moment ago).
- Expired: an older item whose data is all cleaned (or that never held any): neither readable nor writable.
  Moving the logic queue back onto its broker reuses its physical queue instead of adding one.

Pure: the caller reads the physical queue's min offset from the item's broker.
"""

from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem

NORMAL = "Normal"
READ_ONLY = "ReadOnly"
EXPIRED = "Expired"
UNKNOWN = "Unknown"  # the item's broker did not answer


def holds_readable_data(item: LogicQueueMappingItem, physical_min: int) -> bool:
    """Whether [start, end) of a closed item still has a message at or after the physical queue's min."""
    assert item.end_offset_decided(), f"{item} is still open"
    return max(physical_min, item.start_offset) < item.end_offset


def item_status(item: LogicQueueMappingItem, is_leader: bool, physical_min: int | None,
                keeps_state: bool = False) -> str:
    """``keeps_state``: the topic's data outlives the commitlog (the KV store's shards keep their state in
    RocksDB), so an older item never expires by time."""
    if is_leader:
        return NORMAL
    if keeps_state or not item.end_offset_decided():
        return READ_ONLY
    if physical_min is None:
        return UNKNOWN
    return READ_ONLY if holds_readable_data(item, physical_min) else EXPIRED


def reusable(item: LogicQueueMappingItem, physical_min: int) -> bool:
    """Whether moving the logic queue back onto the item's broker may reuse its physical queue: expired, and it
    held data. The new item then starts above every offset the old one used, so a consumer offset stored for
    the old item (at or below that start) is never read as the new one's; an item that never held data would
    start the new one at 0, where a stored offset is ambiguous."""
    return item.end_offset_decided() and item.end_offset > item.start_offset and not holds_readable_data(
        item, physical_min)


def logic_range(item: LogicQueueMappingItem, status: str) -> tuple[int | None, int | None]:
    """(first logic offset, last logic offset) the item covers, inclusive, as the seed writes ``0(0-100)``;
    None for a bound not decided yet (an open leader: ``0(101-)``); (None, None) for an expired item."""
    if status == EXPIRED or not item.logic_offset_decided():
        return None, None
    if not item.end_offset_decided():
        return item.logic_offset, None
    return item.logic_offset, item.max_logic_offset() - 1
