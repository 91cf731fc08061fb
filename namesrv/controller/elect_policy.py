"""Which replica becomes master (RocketMQ's DefaultElectPolicy, without its preferred-broker hint).

Among the candidates the caller found eligible (alive, and in the sync state set unless elections may be
unclean): the one that saw the newest master epoch, then the longest log, then the lowest configured
election priority, then the lowest broker id, so that the choice is deterministic.
"""

from collections.abc import Mapping

from namesrv.controller.replica_models import ReplicaLiveness


def elect(candidates: Mapping[int, ReplicaLiveness]) -> int | None:
    """The chosen broker id, or None when there is no candidate."""
    if not candidates:
        return None
    return min(candidates, key=lambda broker_id: _rank(broker_id, candidates[broker_id]))


def _rank(broker_id: int, live: ReplicaLiveness) -> tuple[int, int, int, int]:
    return -live.master_epoch, -live.max_offset, live.election_priority, broker_id
