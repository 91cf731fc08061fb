"""Which logic queues move where when a broker is drained or a cluster is rebalanced: pure choices over one
topic's leaders, with the fewest moves.

Leadership is balanced per topic first (producers spread a topic's traffic over its leaders), then across
topics (``global_load``: logic queues each broker leads over every static topic, updated as moves are chosen,
so fifty topics drained one after another still spread evenly). Ties go to the smaller broker name, so a
re-run chooses the same.
"""

from collections import Counter
from collections.abc import Iterable


def _pick(candidates: Iterable[str], topic_load: Counter[str], global_load: Counter[str]) -> str:
    return min(candidates, key=lambda b: (topic_load[b], global_load[b], b))


def _assign(gids: list[int], leaders: dict[int, str], room: dict[str, int], topic_load: Counter[str],
            global_load: Counter[str]) -> dict[int, str]:
    moves: dict[int, str] = {}
    for gid in sorted(gids):
        open_targets = [b for b, n in room.items() if n > 0]
        if not open_targets:
            break
        target = _pick(open_targets, topic_load, global_load)
        room[target] -= 1
        topic_load[target] += 1
        global_load[target] += 1
        topic_load[leaders[gid]] -= 1
        global_load[leaders[gid]] -= 1
        moves[gid] = target
    return moves


def drain_moves(leaders: dict[int, str], drained: str, targets: list[str],
                global_load: Counter[str]) -> dict[int, str]:
    """Every logic queue ``drained`` leads -> one of ``targets``; nothing else moves.

    ``leaders``: logic id -> leader, for the topic's queues whose leader is decided."""
    assert drained not in targets, "a drained broker is not a target"
    mine = [gid for gid, b in leaders.items() if b == drained]
    if not mine or not targets:
        return {}
    topic_load = Counter(b for b in leaders.values() if b in targets)
    return _assign(mine, leaders, dict.fromkeys(targets, len(mine)), topic_load, global_load)


def rebalance_moves(leaders: dict[int, str], targets: list[str], members: set[str],
                    global_load: Counter[str]) -> dict[int, str]:
    """Spread the logic queues led inside ``members`` (a cluster's brokers) over ``targets`` within one of
    each other, moving as few as possible: brokers above their share give up their highest logic ids (the
    newest ones), members that are not targets give up all; brokers below their share take them."""
    ours = {gid: b for gid, b in leaders.items() if b in members}
    if not ours or not targets:
        return {}
    topic_load = Counter({b: 0 for b in targets}) + Counter(ours.values())
    base, extra = divmod(len(ours), len(targets))
    # the ``extra`` larger shares go to those holding most already: fewer moves
    by_load = sorted(targets, key=lambda b: (-topic_load[b], b))
    share = {b: base + (1 if i < extra else 0) for i, b in enumerate(by_load)}
    leaving: list[int] = []
    for bname in sorted(set(ours.values())):
        excess = topic_load[bname] - share.get(bname, 0)
        if excess > 0:
            leaving += sorted((g for g, b in ours.items() if b == bname), reverse=True)[:excess]
    room = {b: share[b] - topic_load[b] for b in targets if share[b] > topic_load[b]}
    return _assign(leaving, ours, room, topic_load, global_load)
