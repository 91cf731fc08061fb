"""Index by message key and unique key, a dispatcher in the reput chain."""

import logging
import threading
import time
from pathlib import Path

from broker.store.checkpoint import OffsetCheckpoint
from broker.store.dispatch.commit_log_dispatcher import CommitLogDispatcher
from broker.store.dispatch.dispatch_request import DispatchRequest
from broker.store.index.index_file import IndexFile
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
        self._key_prefixes: dict[str, bytes] = {}  # topic -> b"topic#"

    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in self.root.iterdir() if p.name.isdigit()):
            self._files.append(IndexFile(path, self.slot_num, self.index_num))
        self._checkpoint = self._checkpoint_file.read() or 0

    def _indexed_end(self) -> int:
        return self._files[-1].end_phy_offset if self._files else 0

    def _writable(self) -> IndexFile:
        if not self._files or self._files[-1].is_full():
            name = f"{time.time_ns() // 1000:020d}"
            f = IndexFile(self.root / name, self.slot_num, self.index_num)
            f.set_end(self._indexed_end())
            self._files.append(f)
        return self._files[-1]

    # -- dispatcher --------------------------------------------------------------------------------
    def dispatch(self, requests: list[DispatchRequest], end_offset: int) -> None:
        with self._lock:
            done = self._indexed_end()
            entries: list[tuple[bytes, int, int]] = []
            add = entries.append
            prefixes = self._key_prefixes
            # Reput hands records of a run that share properties the same object: their keys are found once.
            seen_props: bytes | None = None
            seen_keys: list[bytes] = []
            for topic, _qid, _qoff, physical_offset, _size, _tags, store_ts, props in requests:
                if physical_offset < done or not props:
                    continue  # already indexed before a restart, or nothing to index
                if props is not seen_props:
                    seen_props, seen_keys = props, _keys_of(props)
                if not seen_keys:
                    continue
                prefix = prefixes.get(topic)
                if prefix is None:
                    prefix = prefixes[topic] = index_key(topic, "").encode()
                for key in seen_keys:
                    add((prefix + key, physical_offset, store_ts))
            while entries:
                entries = self._writable().put_batch(entries)
            if end_offset > done:
                self._writable().set_end(end_offset)

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
    found = [key for key in keys.split(KEY_SEPARATOR_BYTES) if key] if keys is not None else []
    unique_key = find_property(props, UNIQUE_KEY_NEEDLE) if UNIQUE_KEY_NEEDLE in props else None
    if unique_key is not None:
        found.append(unique_key)
    return found
