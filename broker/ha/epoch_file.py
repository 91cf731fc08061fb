"""The epoch file: which master epoch wrote which part of the commitlog (Kafka's leader-epoch checkpoint,
upstream's ``epochFileCheckpoint``). Entry (epoch, start) says the records from ``start`` up to the next entry's
start were written by the master of ``epoch``. A replica rejoining a new master asks where the master's log
stops agreeing with its own (the leader-epoch rule, KIP-101) instead of trusting its own end, which is how a
divergent unacknowledged tail is found.

On disk: a count line, a crc32 line, then ``epoch-start`` lines, replaced atomically (common/atomic_file.py).
"""

import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from common.atomic_file import write_file_atomically

FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[EpochEntry] = _read(path) if path.exists() else []

    # -- queries -----------------------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def last_epoch(self) -> int:
        with self._lock:
            return self._entries[-1].epoch if self._entries else 0

    def epoch_at(self, offset: int) -> EpochEntry | None:
        """The entry whose records include ``offset`` (the newest starting at or below it)."""
        with self._lock:
            found = None
            for entry in self._entries:
                if entry.start_offset > offset:
                    break
                found = entry
            return found

    def next_start_after(self, epoch: int) -> int | None:
        """Where the epoch after ``epoch`` starts (a replication frame must stop there), None for the newest."""
        with self._lock:
            return next((e.start_offset for e in self._entries if e.epoch > epoch), None)

    def agreed_end(self, log_end: int, replica: list[EpochEntry], replica_end: int) -> int:
        """Where a replica's log (``replica`` epochs, ending at ``replica_end``) stops agreeing with this one
        (ending at ``log_end``): the leader-epoch rule with both sides' ends (KIP-101 as refined by KIP-279). Take
        our newest epoch not newer than the replica's newest; the logs agree up to where that epoch ends here and
        where it ends on the replica (a replica may hold an epoch we never had right after it)."""
        if not replica:
            return min(replica_end, self.end_offset_for(0, log_end))
        end_here = self.end_offset_for(replica[-1].epoch, log_end)
        with self._lock:
            found = [e for e in self._entries if e.epoch <= replica[-1].epoch]
        if not found:
            return min(replica_end, end_here)
        epoch = found[-1].epoch
        end_there = next((e.start_offset for e in replica if e.epoch > epoch), replica_end)
        return min(replica_end, end_here, end_there)

    def end_offset_for(self, epoch: int, log_end: int) -> int:
        """The leader-epoch rule, asked of a master by a replica whose newest epoch is ``epoch``: where the master's
        records of the newest epoch <= ``epoch`` end (the next epoch's start, or ``log_end`` for the current one).
        A replica's records below that offset, of that epoch or older, are the master's; later ones diverge.
        With no epoch <= ``epoch`` here the two logs share only what precedes the first epoch."""
        with self._lock:
            older = [e for e in self._entries if e.epoch <= epoch]
            if not older:
                return self._entries[0].start_offset if self._entries else log_end
            later = [e for e in self._entries if e.epoch > older[-1].epoch]
            return later[0].start_offset if later else log_end

    # -- changes (each persisted before it returns) ------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``. Entries of that epoch or newer, or starting at or past
        ``start_offset``, are replaced (they described records that no longer exist)."""
        with self._lock:
            if self._entries and self._entries[-1] == EpochEntry(epoch, start_offset):
                return
            assert not self._entries or epoch >= self._entries[-1].epoch, \
                f"epoch {epoch} after {self._entries[-1]}: epochs never decrease"
            kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
            self._write([*kept, EpochEntry(epoch, start_offset)])

    def truncate_from(self, offset: int) -> None:
        """The commitlog was cut at ``offset``: epochs starting at or past it wrote nothing that remains."""
        with self._lock:
            kept = [e for e in self._entries if e.start_offset < offset]
            if kept != self._entries:
                self._write(kept)

    def replace(self, entries: list[EpochEntry], log_end: int) -> None:
        """Adopt a master's epochs as far as this log goes (a replica after its handshake)."""
        with self._lock:
            kept = [e for e in entries if e.start_offset <= log_end]
            if kept != self._entries:
                self._write(kept)

    def _write(self, entries: list[EpochEntry]) -> None:
        lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
        text = f"{len(entries)}\n{zlib.crc32(lines.encode())}\n{lines}"
        write_file_atomically(self.path, text.encode("ascii"))
        self._entries = entries


def _read(path: Path) -> list[EpochEntry]:
    text = path.read_text(encoding="ascii")
    head, _, rest = text.partition("\n")
    crc, _, lines = rest.partition("\n")
    if zlib.crc32(lines.encode()) != int(crc):
        raise ValueError(f"{path}: checksum mismatch (the file was damaged; restore it or remove the replica's "
                         "store to copy it afresh)")
    entries = [EpochEntry(*map(int, line.split("-"))) for line in lines.splitlines()]
    assert len(entries) == int(head), f"{path}: {len(entries)} entries, header says {head}"
    return entries
