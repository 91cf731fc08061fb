"""Consistency rules for the mapping infos brokers register for static topics (name server and SDK).

A mapping info is one broker's word on one static topic: its epoch, the topic's total of logic queues and
``{logic id: physical id}`` for the logic queues it leads. The name server and the SDK route by these infos; one
that breaks a rule is an intermediate, corrupt or forged state, so it is ignored instead of routed by. Each
check answers why an info fails (the rule's name and the numbers, for an operator's log) or None.

Pure functions over anything shaped like an info: the name server's dataclass and the proto alike.
"""

from collections.abc import Mapping
from typing import Protocol


class MappingInfoLike(Protocol):
    """What the rules read (``namesrv.route_models.TopicQueueMappingInfo``, ``common_pb2.TopicQueueMappingInfo``)."""

    @property
    def total_queues(self) -> int: ...
    @property
    def bname(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def dirty(self) -> bool: ...
    @property
    def curr_id_map(self) -> Mapping[int, int]: ...


def field_fault(info: MappingInfoLike, broker_name: str) -> str | None:
    """Rule 1, the info on its own: a positive total, every logic id inside 0..total-1, physical ids
    non-negative and each used by one logic id, and (when it names one) ``bname`` is ``broker_name``."""
    if info.total_queues <= 0:
        return f"total not positive: total queues {info.total_queues}"
    if info.bname and info.bname != broker_name:
        return f"bname mismatch: info of {info.bname} registered by {broker_name}"
    holes = sorted(logic_id for logic_id in info.curr_id_map if not 0 <= logic_id < info.total_queues)
    if holes:
        return f"hole: logic queue {holes[0]} outside 0..{info.total_queues - 1}"
    return _physical_fault(info.curr_id_map)


def _physical_fault(curr_id_map: Mapping[int, int]) -> str | None:
    owner: dict[int, int] = {}  # physical id -> the first logic id on it
    for logic_id, physical_id in sorted(curr_id_map.items()):
        if physical_id < 0:
            return f"negative physical queue {physical_id} for logic queue {logic_id}"
        first = owner.setdefault(physical_id, logic_id)
        if first != logic_id:
            return f"shared physical queue {physical_id}: logic queues {first} and {logic_id}"
    return None


def epoch_fault(info: MappingInfoLike, accepted: MappingInfoLike | None) -> str | None:
    """Rule 3: a broker's epoch for a topic never goes below the one accepted from it before (a stale replay or a
    rolled-back broker would otherwise take queues back)."""
    if accepted is not None and info.epoch < accepted.epoch:
        return f"epoch going backwards: {info.epoch} after {accepted.epoch}"
    return None


def rival_fault(info: MappingInfoLike, broker_name: str, accepted: Mapping[str, MappingInfoLike]) -> str | None:
    """Rule 2, against the other brokers' accepted infos of the topic: at one epoch, one total and one leader per
    logic queue. A dirty info is compared with dirty ones only: readers rank clean infos first, so a dirty/clean
    tie is already resolved (and a legit state)."""
    for other_name, other in sorted(accepted.items()):
        if other_name == broker_name or other.epoch != info.epoch or other.dirty != info.dirty:
            continue
        if other.total_queues != info.total_queues:
            return (f"total mismatch at epoch {info.epoch}: {other_name} has {other.total_queues}, "
                    f"{broker_name} has {info.total_queues}")
        shared = sorted(info.curr_id_map.keys() & other.curr_id_map.keys())
        if shared:
            return two_leaders(info.epoch, shared[0], other_name, broker_name)
    return None


def two_leaders(epoch: int, logic_id: int, kept: str, ignored: str) -> str:
    """The reason for two claims on one logic queue at one epoch; ``kept`` routes, ``ignored`` does not."""
    return f"two leaders at epoch {epoch} for logic queue {logic_id}: {kept} and {ignored}"


def registration_fault(info: MappingInfoLike, broker_name: str,
                       accepted: Mapping[str, MappingInfoLike]) -> str | None:
    """All three rules, as the name server applies them to ``broker_name``'s new info; ``accepted``: the
    topic's accepted infos by broker name (this broker's previous one included)."""
    return (field_fault(info, broker_name) or epoch_fault(info, accepted.get(broker_name))
            or rival_fault(info, broker_name, accepted))
