"""The state a new replica copies besides the log (``CopyState`` in proto/ha.proto).

A replica copies its master's commitlog and rebuilds what derives from it with its own reput. That holds while the
master's log is whole. Once its oldest segments expired, two stores hold what only those records made: KV values
(a value lives until it is overwritten) and pending timers (a timer holds a copy of its record). So an empty replica
of such a master first copies both, each as of one moment (the applied offset it reflects), and then the log from
the master's oldest segment: its reput replays what follows, and each store skips the records below its applied
offset, as it does after a restart. Both stores' applied offsets are at or past that segment's start (a segment
expires only below them).

A copy cut short (the stream broke, the replica died) leaves the replica's log empty, so its next handshake is told
to copy again and the copy starts over: each store is cleared first and its applied offset written last.
"""

import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from broker.rocksdb_records import decode_records, encode_records
from proto import ha_pb2

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20  # a chunk's records, or one record larger than that (a timer's holds a whole message)

Records = list[tuple[bytes, bytes]]


class CopiedStore(Protocol):
    """A store an empty replica copies from its master."""

    def copy_out(self) -> tuple[int, Iterator[tuple[bytes, bytes]]]:
        """The master's side: the applied offset and the records, as of one moment."""
        ...

    def copy_in_begin(self) -> None:
        """The replica's side: forget everything, a copy starts (again)."""
        ...

    def copy_in(self, records: Records) -> None:
        """Store copied records."""
        ...

    def copy_in_end(self, applied_offset: int) -> None:
        """Everything is copied: the state as of ``applied_offset``, durable."""
        ...


def state_chunks(name: str, store: CopiedStore) -> Iterator[ha_pb2.StateChunk]:
    """``store``'s state in chunks of about ``CHUNK_BYTES``; the last one says so (and comes for an empty store)."""
    applied, records = store.copy_out()
    batch: Records = []
    size = 0
    for key, value in records:
        record = len(key) + len(value)
        if batch and size + record > CHUNK_BYTES:  # a chunk is one record over only when that record is alone
            yield ha_pb2.StateChunk(store=name, applied_offset=applied, records=encode_records(batch))
            batch, size = [], 0
        batch.append((key, value))
        size += record
    yield ha_pb2.StateChunk(store=name, applied_offset=applied, records=encode_records(batch), last=True)


def receive_state(stores: dict[str, CopiedStore], chunks: Iterable[ha_pb2.StateChunk]) -> None:
    """Apply a master's ``state_chunks`` to this replica's stores. A store the master sent that this broker does not
    keep (its kvEnable is off) is skipped; a copy that ends before every sent store's last chunk raises."""
    begun: set[str] = set()
    copied = 0
    for chunk in chunks:
        store = stores.get(chunk.store)
        if store is None:
            if chunk.store not in begun:
                log.warning("state_copy_skipped store=%s reason=not_kept_by_this_broker", chunk.store)
                begun.add(chunk.store)
            continue
        if chunk.store not in begun:
            store.copy_in_begin()
            begun.add(chunk.store)
        records: Records = []
        for key, value in decode_records(chunk.records, f"state copy of {chunk.store}"):
            if value is None:
                raise ValueError(f"state copy of {chunk.store} holds a deletion")
            records.append((key, value))
        store.copy_in(records)
        copied += len(records)
        if chunk.last:
            store.copy_in_end(chunk.applied_offset)
            begun.discard(chunk.store)
            log.info("state_copied store=%s records=%d applied_offset=%d", chunk.store, copied,
                     chunk.applied_offset)
            copied = 0
    unfinished = begun & set(stores)
    if unfinished:
        raise ValueError(f"the master's state copy ended before the end of {sorted(unfinished)}")
