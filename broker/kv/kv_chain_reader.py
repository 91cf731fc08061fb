"""Reads across a shard's chain: the leader's partition first, then older items, newest to oldest.

After a remap the new leader's partition starts empty; a key it never saw is looked up on the brokers that
led the shard before (double-read-check, as consumer offsets do), so every key stays readable without
copying anything. Older items are fenced (they take no writes), so what they answer does not change once every
write they took is applied: one on this broker (a shard moved away and back) is read only then, as another
broker's are (``kv_partition_fences.py``).
Calls to other brokers block: run these off the event loop.
"""

import heapq
from collections.abc import Callable, Iterator

from broker.kv.kv_record import PRESENT_TAG
from broker.kv.kv_state_store import KvStateStore
from broker.out.peer_brokers import PeerBrokerError, PeerBrokers
from common.kv_shard import KV_TOPIC
from common.refusal import Refusal, says_not_master
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import broker_pb2, kv_pb2, kv_pb2_grpc

Entries = list[tuple[bytes, bytes]]  # (key, raw state)
_STATE_OF = {kv_pb2.KV_PRESENT: lambda v: bytes([PRESENT_TAG]) + v, kv_pb2.KV_DELETED: lambda _v: b"\x00"}


def entry_state(entry: kv_pb2.KvEntry) -> bytes | None:
    """A raw state from its wire form (None: absent)."""
    make = _STATE_OF.get(entry.state)
    return make(entry.value) if make else None


def to_entry(key: bytes, raw: bytes | None) -> kv_pb2.KvEntry:
    if raw is None:
        return kv_pb2.KvEntry(key=key, state=kv_pb2.KV_ABSENT)
    if raw[0] == PRESENT_TAG:
        return kv_pb2.KvEntry(key=key, state=kv_pb2.KV_PRESENT, value=raw[1:])
    return kv_pb2.KvEntry(key=key, state=kv_pb2.KV_DELETED)


class KvChainReader:
    def __init__(self, state: KvStateStore, peers: Callable[[], PeerBrokers], broker_name: str,
                 check_applied: Callable[[int], None] = lambda partition: None) -> None:
        """``check_applied(partition)`` raises while a local partition no longer led has writes not applied."""
        self.state = state
        self._peers = peers
        self.broker_name = broker_name
        self._check_applied = check_applied

    # -- one item ----------------------------------------------------------------------------------
    def item_get(self, item: LogicQueueMappingItem, keys: list[bytes]) -> list[bytes | None]:
        if item.bname == self.broker_name:
            self._check_applied(item.queue_id)
            return self.state.get(item.queue_id, keys)
        states: list[bytes | None] = []
        while len(states) < len(keys):  # an answer holds at most MAX_GET_ANSWER_BYTES: the rest are asked again
            response = self._call(item, "Get", kv_pb2.KvGetRequest(
                keys=keys[len(states):], addressing=broker_pb2.PHYSICAL, queue_id=item.queue_id))
            if not response.states:
                raise PeerBrokerError(f"KV Get of {KV_TOPIC} queue {item.queue_id} on broker {item.bname} answered "
                                      "no key")
            states += [raw or None for raw in response.states]
        return states

    def item_scan(self, item: LogicQueueMappingItem, shard: int, prefix: bytes, start_after: bytes,
                  limit: int) -> Entries:
        if item.bname == self.broker_name:
            self._check_applied(item.queue_id)
            return self.state.scan(item.queue_id, prefix, start_after, limit)
        response = self._call(item, "Scan", kv_pb2.KvScanRequest(
            shard=shard, prefix=prefix, start_after=start_after, limit=limit, addressing=broker_pb2.PHYSICAL,
            queue_id=item.queue_id))
        return [(e.key, entry_state(e) or b"\x00") for e in response.entries]

    def _call(self, item: LogicQueueMappingItem, method: str, request):
        """An older item's answer: from its broker's master, or while that cannot be reached, from a slave of its
        group (which holds the partition's state as replicated)."""
        response = self._peers().call(item.bname, method, request, service=kv_pb2_grpc.KvServiceStub,
                                      replica_ok=True)
        if response.code == ResponseCode.SUCCESS:
            return response
        what = f"KV {method} of {KV_TOPIC} queue {item.queue_id} on broker {item.bname}: {response.remark}"
        if response.code == ResponseCode.SERVICE_NOT_AVAILABLE and not says_not_master(response.remark):
            # Its KV store is off (kvEnable=false): the keys it holds stay unreadable until it is on again, and
            # retrying (SYSTEM_BUSY) only made every call wait its whole retry timeout
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"{what}; the shard's keys written while it led the "
                          "shard are read there")
        raise PeerBrokerError(what)

    # -- the chain ---------------------------------------------------------------------------------
    def older_get(self, chain: list[LogicQueueMappingItem], keys: list[bytes],
                  found: list[bytes | None]) -> list[bytes | None]:
        """Fill the None slots of ``found`` (states of ``keys`` from the newest item) from older items."""
        found = list(found)
        for item in reversed(chain[:-1]):
            missing = [i for i, raw in enumerate(found) if raw is None]
            if not missing:
                break
            for i, raw in zip(missing, self.item_get(item, [keys[i] for i in missing]), strict=True):
                found[i] = raw
        return found

    def scan(self, chain: list[LogicQueueMappingItem], shard: int, prefix: bytes, start_after: bytes,
             limit: int) -> tuple[Entries, bool]:
        """Up to ``limit`` live (key, raw state) after ``start_after``, merged over the chain (the newest
        item holding a key decides it); and whether nothing follows them."""
        live: Entries = []
        cursor = start_after
        while len(live) < limit:
            page, cursor, exhausted = self._merged_page(chain, shard, prefix, cursor, limit)
            live += [(k, raw) for k, raw in page if raw[0] == PRESENT_TAG]
            if exhausted:
                return live[:limit], len(live) <= limit
        return live[:limit], False

    def _merged_page(self, chain: list[LogicQueueMappingItem], shard: int, prefix: bytes, cursor: bytes,
                     limit: int) -> tuple[Entries, bytes, bool]:
        """One page of every item after ``cursor``, merged. Keys are complete up to the smallest last key
        of the items whose page was full; the page stops there."""
        merged: dict[bytes, bytes] = {}
        complete_up_to: bytes | None = None
        for item in reversed(chain):
            entries = self.item_scan(item, shard, prefix, cursor, limit)
            for key, raw in entries:
                merged.setdefault(key, raw)
            if len(entries) >= limit:
                last = entries[-1][0]
                complete_up_to = last if complete_up_to is None else min(complete_up_to, last)
        keys = sorted(k for k in merged if complete_up_to is None or k <= complete_up_to)
        page = [(k, merged[k]) for k in keys]
        exhausted = complete_up_to is None
        return page, (keys[-1] if keys else cursor), exhausted

    def merged_entries(self, chain: list[LogicQueueMappingItem], shard: int,
                       newest: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """Every live (key, raw state) of the shard in key order: ``newest`` (the leader's partition) merged
        with the older items, read page by page."""
        sources = [newest, *(self._pages(item, shard) for item in reversed(chain[:-1]))]
        last = None
        for key, _rank, raw in heapq.merge(*(_ranked(src, rank) for rank, src in enumerate(sources))):
            if key != last:
                last = key
                if raw[0] == PRESENT_TAG:
                    yield key, raw

    def _pages(self, item: LogicQueueMappingItem, shard: int, page: int = 1000) -> Iterator[tuple[bytes, bytes]]:
        cursor = b""
        while True:
            entries = self.item_scan(item, shard, b"", cursor, page)
            yield from entries
            if len(entries) < page:
                return
            cursor = entries[-1][0]


def _ranked(entries: Iterator[tuple[bytes, bytes]], rank: int) -> Iterator[tuple[bytes, int, bytes]]:
    for key, raw in entries:
        yield key, rank, raw
