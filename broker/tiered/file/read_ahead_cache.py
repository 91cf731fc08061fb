"""Read-ahead for flat files on a backend where every read is a round trip (S3): committed segment bytes kept
in memory in aligned blocks, bounded in bytes, least recently used first out (upstream's fetcher read-ahead
cache, kept here at the byte level so the provider contract is untouched).

A flat file reads a block ``[k * block_size, (k + 1) * block_size)`` of a segment, clipped to the segment's
committed size, with one backend read and serves the following reads of that block from memory: a consumer
reading a queue in pulls of 64 messages makes one request per few thousand messages instead of two a pull.
A reader reading a block a second time (going through it,
not reading at a random place) has the next one fetched in the background (``prefetch``), so a sequential
reader rarely waits for the backend (the broker serves pulls on its event loop: a wait there stalls them all).
The last block of a segment still being written is cached as far as it was committed; a later read past that
fetches only the bytes committed since (a consumer tailing the tier does not re-read what it has).

Committed bytes never change in place (a flat file only appends after them), so nothing cached goes stale
while the flat file that cached it lives; a flat file that forgets committed bytes (``cut_to``, ``load``
reconciling against the backend) stops seeing what it cached before (its keys carry a generation). Entries of
a flat file that is gone (a restart, expired segments) are never hit again and fall out by age.
"""

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

CacheKey = tuple[Hashable, ...]


class ReadAheadCache:
    """Blocks of segment bytes by key, at most ``capacity`` bytes in all (0: nothing is kept). Thread-safe."""

    def __init__(self, capacity: int, prefetch_threads: int = 2) -> None:
        self.capacity = capacity
        self.prefetch_threads = prefetch_threads
        self._pool: ThreadPoolExecutor | None = None
        self._pending: set[CacheKey] = set()  # blocks being fetched in the background
        self._closed = False
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._blocks: OrderedDict[CacheKey, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> bytes | None:
        with self._lock:
            data = self._blocks.get(key)
            if data is None:
                self.misses += 1
                return None
            self._blocks.move_to_end(key)
            self.hits += 1
            return data

    def holds(self, key: CacheKey, length: int) -> bool:
        """Whether ``key`` is cached with at least ``length`` bytes or is being fetched (no hit counted)."""
        with self._lock:
            data = self._blocks.get(key)
            return key in self._pending or (data is not None and len(data) >= length)

    def prefetch(self, key: CacheKey, fetch: Callable[[], object]) -> None:
        """Run ``fetch`` (which caches ``key``) in the background unless it is already under way."""
        if self.prefetch_threads <= 0:
            return
        with self._lock:
            if key in self._pending or self._closed:
                return
            self._pending.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.prefetch_threads, thread_name_prefix="tiered-read-ahead")
            pool = self._pool

        def run() -> None:
            try:
                fetch()
            except Exception:  # a read-ahead only: the reader that needs the block reads it itself
                log.debug("tiered_read_ahead_failed key=%s", key, exc_info=True)
            finally:
                with self._lock:
                    self._pending.discard(key)

        try:
            pool.submit(run)
        except RuntimeError:  # shutting down
            with self._lock:
                self._pending.discard(key)

    def shutdown(self) -> None:
        """Stop reading ahead (background fetches under way finish); reads still work, without prefetch."""
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def put(self, key: CacheKey, data: bytes) -> None:
        if len(data) > self.capacity:
            return
        with self._lock:
            old = self._blocks.pop(key, None)
            if old is not None:
                self.size -= len(old)
            self._blocks[key] = data
            self.size += len(data)
            while self.size > self.capacity:
                _, evicted = self._blocks.popitem(last=False)
                self.size -= len(evicted)

    def __len__(self) -> int:
        return len(self._blocks)


class ReadAhead:
    """How a flat file reads ahead: blocks of ``block_size`` bytes into a (shared) cache."""

    def __init__(self, cache: ReadAheadCache, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError(f"read-ahead block size {block_size}")
        self.cache = cache
        self.block_size = block_size
