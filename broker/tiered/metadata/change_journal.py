"""Which records a metadata store changed, in order, so that a replica's copy carries only what changed since its
copy before (``broker/tiered/replica/``): a tier of many queues, most of them idle, is not sent whole every time.

Held in memory for the store's life: a version names this journal (``epoch``, new at every open) and a change
count. A copy asked since another epoch's version, or since changes the journal no longer holds (it keeps the
latest ``limit`` keys), is whole."""

import uuid
from collections import OrderedDict
from collections.abc import Iterable

JOURNAL_KEYS = 1 << 16  # keys remembered (the latest change of each), ~10 MiB: far more than change between copies


class ChangeJournal:
    def __init__(self, limit: int = JOURNAL_KEYS) -> None:
        self.epoch = uuid.uuid4().hex[:16]
        self.seq = 0
        self.limit = limit
        self._changed: OrderedDict[bytes, int] = OrderedDict()  # key -> the change that last touched it, in order
        self._floor = 0  # changes up to this one may be forgotten: a copy since before it is whole

    @property
    def version(self) -> str:
        return f"{self.epoch}:{self.seq}"

    def record(self, keys: Iterable[bytes]) -> None:
        """One change (a write or a batch) of ``keys``; called with the store's write, under its lock."""
        self.seq += 1
        changed = self._changed
        for key in keys:
            changed[key] = self.seq
            changed.move_to_end(key)
        while len(changed) > self.limit:
            _, seq = changed.popitem(last=False)
            self._floor = max(self._floor, seq)

    def since(self, version: str) -> list[bytes] | None:
        """The keys changed after ``version``; None if this journal cannot tell (not its epoch, or too old)."""
        epoch, _, count = version.partition(":")
        if epoch != self.epoch or not count.isdigit() or not self._floor <= int(count) <= self.seq:
            return None
        after = int(count)
        keys = []
        for key, seq in reversed(self._changed.items()):
            if seq <= after:
                break
            keys.append(key)
        return keys
