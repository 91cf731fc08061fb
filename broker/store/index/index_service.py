"""Index by message key and unique key, a dispatcher in the reput chain."""

import logging
import threading
import time
from collections.abc import Iterator
from itertools import repeat
from operator import and_, getitem, methodcaller
from pathlib import Path
from zlib import crc32

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, PROPERTIES, DispatchRequest
from broker.store.index.index_file import HASH_MASK, IndexFile
from common.message_properties import (
    KEY_SEPARATOR,
    KEYS_NEEDLE,
    PROPERTY_SEPARATOR,
    UNIQUE_KEY_NEEDLE,
    find_property,
)

log = logging.getLogger(__name__)


KEY_SEPARATOR_BYTES = KEY_SEPARATOR.encode()
PAIR_END = PROPERTY_SEPARATOR.encode()
UNIQUE_AT = len(UNIQUE_KEY_NEEDLE)  # where a unique key written first starts
# A message's keys indexed: its first 64 distinct ones (upstream indexes every one: a batch whose messages each
# carried 15,000 keys, within the properties' limit, held every topic's dispatch 17 s and wrote 10x its size in
# index entries). Only keys among the first MAX_KEYS_SPLIT are looked at.
MAX_INDEXED_KEYS = 64
MAX_KEYS_SPLIT = 4 * MAX_INDEXED_KEYS


EntryColumns = tuple[list[int], list[int], list[int]]  # key hashes, commitlog offsets, store times


def index_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexService(CommitLogDispatcher):
    name = "index"

    def __init__(self, root: Path, slot_num: int, index_num: int) -> None:
        self.root = root
        self.slot_num = slot_num
        self.index_num = index_num
        self._files: list[IndexFile] = []
        self._checkpoint_file = OffsetCheckpoint(root / ".checkpoint")
        self._checkpoint = 0
        self._lock = threading.Lock()  # dispatch vs. lookup vs. expiry
        self._prefix_crcs: dict[str, int] = {}  # topic -> CRC of b"topic#"

    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._checkpoint = self._checkpoint_file.read() or 0
        size = IndexFile.size_for(self.slot_num, self.index_num)
        paths = sorted(p for p in self.root.iterdir() if p.name.isdigit())
        for i, path in enumerate(paths):
            if len(self._files) < i:  # one before was set aside: what follows is indexed again after it
                self._set_aside(path, "after a damaged file")
                continue
            if path.stat().st_size != size:
                self._set_aside(path, f"size {path.stat().st_size}, not {size}")
                continue
            f = IndexFile(path, self.slot_num, self.index_num)
            end = self._indexed_end()
            # Files roll only when full, and each goes on from where the one before ends.
            if f.end_phy_offset < max(f.begin_phy_offset, end) or (path != paths[-1] and not f.is_full()):
                f.close()
                self._set_aside(path, f"header says {f.index_count} entries, offsets {f.begin_phy_offset}.."
                                      f"{f.end_phy_offset}, after {end}")
                continue
            self._files.append(f)

    def _set_aside(self, path: Path, why: str) -> None:
        """A damaged index file (cut short, a zeroed header; or one made for other slot or entry counts): moved
        aside, kept, and the keys from where the files before it end indexed again from the commitlog (loaded as
        it was, a cut file fail-stopped the store at the next send, at every start, and a zeroed header answered
        "not found")."""
        path.rename(path.with_name(path.name + ".damaged"))
        self._checkpoint = min(self._checkpoint, self._indexed_end())
        log.warning("index_file_set_aside file=%s reason=%r reindex_from=%d: its keys are indexed again from the "
                    "commitlog; the file is kept as %s.damaged", path, why, self._checkpoint, path.name)

    def _indexed_end(self) -> int:
        return self._files[-1].end_phy_offset if self._files else 0

    def _writable(self) -> IndexFile:
        if not self._files or self._files[-1].is_full():
            # named by the time, after the last one's name whatever the clock did (files load in name order)
            last = int(self._files[-1].path.name) if self._files else 0
            name = f"{max(time.time_ns() // 1000, last + 1):020d}"
            f = IndexFile(self.root / name, self.slot_num, self.index_num)
            f.set_end(self._indexed_end())
            self._files.append(f)
        return self._files[-1]

    # -- dispatcher --------------------------------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        with self._lock:
            done = self._indexed_end()
            if requests and requests[-1][PHYSICAL_OFFSET] < done:
                return  # indexed before a restart (a replay for another dispatcher)
            hashes, offsets, timestamps = (self._unique_key_entries(requests, done)
                                           or self._entries(requests, done))
            added = 0
            while added < len(hashes):
                added += self._writable().put_batch(hashes[added:], offsets[added:], timestamps[added:])
            if end_offset > done:
                self._writable().set_end(end_offset)

    def _unique_key_entries(self, requests: list[DispatchRequest], done: int) -> EntryColumns | None:
        """The entries of the common run, records of one topic not indexed yet, each with only the unique key the
        SDK writes first, found in C-level passes over all of them; None for any other run."""
        if not requests or not requests[0][PROPERTIES].startswith(UNIQUE_KEY_NEEDLE):  # (before the columns are built)
            return None
        topics, _, _, offsets, _, _, timestamps, props = zip(*requests, strict=True)
        n = len(requests)
        if topics.count(topics[0]) != n or offsets[0] < done or KEYS_NEEDLE in b"".join(props):
            return None
        if not all(map(methodcaller("startswith", UNIQUE_KEY_NEEDLE), props)):
            return None
        ends = list(map(methodcaller("find", PAIR_END, UNIQUE_AT), props))
        if -1 in ends:  # a block without a closing separator: left to _keys_of
            return None
        keys: Iterator[bytes] = map(getitem, props, map(slice, repeat(UNIQUE_AT, n), ends))
        hashes = list(map(and_, map(crc32, keys, repeat(self._prefix_crc(topics[0]), n)), repeat(HASH_MASK, n)))
        return hashes, list(offsets), list(timestamps)

    def _entries(self, requests: list[DispatchRequest], done: int) -> EntryColumns:
        hashes: list[int] = []
        offsets: list[int] = []
        timestamps: list[int] = []
        # Reput hands records of a run that share properties the same object: their keys are found once.
        seen_props: bytes | None = None
        seen_keys: list[bytes] = []
        for topic, _qid, _qoff, physical_offset, _size, _tags, store_ts, props in requests:
            if physical_offset < done or not props:
                continue  # already indexed before a restart, or nothing to index
            if props is not seen_props:
                seen_props, seen_keys = props, _keys_of(props)
            prefix_crc = self._prefix_crc(topic) if seen_keys else 0
            for key in seen_keys:
                hashes.append(crc32(key, prefix_crc) & HASH_MASK)
                offsets.append(physical_offset)
                timestamps.append(store_ts)
        return hashes, offsets, timestamps

    def _prefix_crc(self, topic: str) -> int:
        """The CRC of ``topic#``: an entry's hash is the CRC of ``topic#key``, continued from it over the key."""
        crc = self._prefix_crcs.get(topic)
        if crc is None:
            crc = self._prefix_crcs[topic] = crc32(index_key(topic, "").encode())
        return crc

    def checkpoint(self) -> int:
        return self._checkpoint

    def flush(self) -> None:
        with self._lock:
            end = self._indexed_end()
            files = list(self._files[-2:])
        for f in files:
            f.flush()
        if end > self._checkpoint:
            self._checkpoint_file.write(end)
            self._checkpoint = end

    def truncate_dirty(self, commit_log_end: int) -> None:
        """Entries past the end stay but point at nothing valid; lookups verify against the commitlog."""
        with self._lock:
            for f in self._files:
                if f.end_phy_offset > commit_log_end:
                    f.set_end(commit_log_end)
            if self._checkpoint > commit_log_end:
                self._checkpoint = commit_log_end
                self._checkpoint_file.write(commit_log_end)

    # -- queries -----------------------------------------------------------------------------------
    def lookup(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Candidate commitlog offsets for ``key`` of ``topic``, newest first (may include collisions)."""
        out: list[int] = []
        with self._lock:  # expiry closes files: hold the lock while reading them
            for f in reversed(self._files):
                if f.index_count <= 1 or f.end_timestamp < begin_ms or f.begin_timestamp > end_ms:
                    continue
                out.extend(f.lookup(index_key(topic, key), max_num - len(out), begin_ms, end_ms))
                if len(out) >= max_num:
                    break
        return out

    def delete_expired(self, commit_log_min_offset: int) -> None:
        """Drop index files whose every entry points below the commitlog's min offset (not the last)."""
        with self._lock:
            while len(self._files) > 1 and self._files[0].end_phy_offset <= commit_log_min_offset:
                f = self._files.pop(0)
                f.destroy()
                log.info("index_file_deleted file=%s", f.path.name)

    def shutdown(self) -> None:
        self.flush()
        for f in self._files:
            f.close()


def _keys_of(props: bytes) -> list[bytes]:
    """A record's index keys: each of its KEYS, then its unique key. The needle can also end a longer name
    ("MYKEYS"): find_property then finds no KEYS property."""
    if props.startswith(UNIQUE_KEY_NEEDLE) and KEYS_NEEDLE not in props:  # the SDK writes the unique key first
        end = props.find(PAIR_END, UNIQUE_AT)
        return [props[UNIQUE_AT:end] if end >= 0 else props[UNIQUE_AT:]]
    keys = find_property(props, KEYS_NEEDLE) if KEYS_NEEDLE in props else None
    found = _distinct_keys(keys) if keys else []
    unique_key = find_property(props, UNIQUE_KEY_NEEDLE) if UNIQUE_KEY_NEEDLE in props else None
    if unique_key is not None:
        found.append(unique_key)
    return found


def _distinct_keys(keys: bytes) -> list[bytes]:
    """The first MAX_INDEXED_KEYS distinct keys of a KEYS property."""
    parts = keys.split(KEY_SEPARATOR_BYTES, MAX_KEYS_SPLIT)
    if len(parts) == 1:
        return parts
    if len(parts) > MAX_KEYS_SPLIT:
        parts.pop()  # the rest, not split
    return list(dict.fromkeys(filter(None, parts)))[:MAX_INDEXED_KEYS]
