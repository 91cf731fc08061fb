"""KV requests: writes through the commitlog (answered once applied), reads from the applied state.

A client addresses a key's shard (LOGIC: this broker must lead it); leaders read older items of a shard on
other brokers with PHYSICAL requests naming the partition (the physical queue). See broker/kv/.
"""

import asyncio
import logging
import struct
import time
import zlib
from collections.abc import AsyncIterator, Callable

from broker.kv.kv_apply_waiters import StoreFailStopped
from broker.kv.kv_chain_reader import Entries, to_entry
from broker.kv.kv_group_commit import KvGroupCommit
from broker.kv.kv_provisioner import KvProvisioner, KvProvisionError
from broker.kv.kv_record import DELETED, FORMAT, MAX_BODY_BYTES, PRESENT_TAG, KvOp, KvRecord, value_of
from broker.kv.kv_store import KvStore
from broker.remote_waits import REMOTE_WAITS
from broker.statictopic.logic_queue_context import LogicQueueContext
from broker.statictopic.static_topic_service import StaticTopicService
from broker.statictopic.topic_queue_mapping_manager import TopicQueueMappingManager
from broker.store.message_store import MessageStore
from broker.store.put_message_result import AppendResult
from common.kv_shard import (
    KV_TOPIC,
    MAX_GET_KEYS,
    MAX_KEY_BYTES,
    KvInputError,
    check_key,
    check_scan_limit,
    check_value,
    shard_of,
    snapshot_shape_error,
)
from common.message_codec import record_size
from common.refusal import Refusal
from common.request_error import RequestError, require
from common.response_code import ResponseCode
from common.statictopic.logic_queue_mapping_item import LogicQueueMappingItem
from proto import broker_pb2, kv_pb2

log = logging.getLogger(__name__)

APPLY_TIMEOUT_S = 10.0
SNAPSHOT_CHUNK_ENTRIES = 1000
SNAPSHOT_CHUNK_BYTES = 32 << 20  # far below the 256 MiB a frame may carry, however large the values
IMPORT_BATCH_ENTRIES = 1000
MAX_IMPORT_BYTES = 1 << 30
# A LOGIC get's states in one answer: below gRPC's 256 MiB a message even with the 16 MiB of other answers a
# stream's frame may carry with it (common/stream_answers.py). Past it the answer holds the first states that fit
# and the client asks again for the other keys (64 values of 4 MiB broke the stream).
MAX_GET_ANSWER_BYTES = 224 << 20
STATE_OVERHEAD = 6  # bytes a state adds beyond its own: its packed length (4), or a field's tag and length (<= 6)
_OPS = {kv_pb2.KV_PUT: KvOp.PUT, kv_pb2.KV_DELETE: KvOp.DELETE, kv_pb2.KV_CAS: KvOp.CAS}
_TOPIC_BYTES = len(KV_TOPIC.encode())


def checked(check: Callable[..., None], *args: object) -> None:
    try:
        check(*args)
    except KvInputError as exc:
        raise RequestError(str(exc)) from None


def _check_keys(keys: list[bytes]) -> None:
    """``check_key`` on each, without a call per key when all are fine (a get takes up to MAX_GET_KEYS)."""
    lengths = list(map(len, keys))
    if min(lengths) == 0 or max(lengths) > MAX_KEY_BYTES:
        for key in keys:
            checked(check_key, key)


def answered(states: list[bytes]) -> list[bytes]:
    """The first ``states`` whose answer stays within ``MAX_GET_ANSWER_BYTES`` (at least one: a value is at most
    4 MiB); all of them, unless they are that large together."""
    if sum(map(len, states)) + STATE_OVERHEAD * len(states) <= MAX_GET_ANSWER_BYTES:  # (no Python call per key)
        return states
    size = 0
    for n, state in enumerate(states):
        size += len(state) + STATE_OVERHEAD
        if size > MAX_GET_ANSWER_BYTES:
            return states[: max(n, 1)]
    return states


def pack_states(states: list[bytes]) -> bytes:
    """``KvGetResponse.packed_states``: their count and each one's length (big-endian uint32s), then the states."""
    return struct.pack(f">I{len(states)}I", len(states), *map(len, states)) + b"".join(states)


class KvProcessor:
    """Raises RequestError for malformed requests and Refusal for ones it cannot serve (KV off, not
    initialised, not the shard's leader, ...): the RPC boundary answers them."""

    def __init__(self, broker_name: str, kv: KvStore | None, provisioner: KvProvisioner | None,
                 mapping_manager: TopicQueueMappingManager, static_topics: StaticTopicService,
                 store: MessageStore) -> None:
        self.broker_name = broker_name
        self.kv = kv  # None: kvEnable=false
        self.provisioner = provisioner
        self.mapping_manager = mapping_manager
        self.static_topics = static_topics
        self.store = store  # the local store: KV ops are written to this broker's commitlog
        self._provisioning: asyncio.Future[int] | None = None
        self._group_commit: KvGroupCommit | None = None  # made on the first write (it needs the running loop)

    # -- where a request goes ----------------------------------------------------------------------
    def _kv(self) -> KvStore:
        if self.kv is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE,
                          f"the KV store is off on broker {self.broker_name} (kvEnable=false)")
        stalled = self.kv.stalled()
        if stalled is not None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"{stalled} on broker {self.broker_name}")
        return self.kv

    def total_shards(self) -> int:
        detail = self.mapping_manager.get(KV_TOPIC)
        if detail is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"the KV store is not initialised on broker "
                          f"{self.broker_name}: run mqadmin kvInit")
        return detail.total_queues

    def _context(self, shard: int) -> LogicQueueContext:
        ctx = self.static_topics.context(KV_TOPIC, shard, broker_pb2.LOGIC)  # NotLeaderError off the leader
        assert ctx is not None
        return ctx

    async def provision(self, request: kv_pb2.KvProvisionRequest) -> kv_pb2.KvProvisionResponse:
        """Create the shards if there are none (first use without kvInit); answers their number."""
        self._kv()
        provisioner = self.provisioner
        assert provisioner is not None, "kvEnable=true without a provisioner"
        # Concurrent first uses share one provisioning run: one worker thread, not one blocked thread per caller.
        if self._provisioning is None or self._provisioning.done():
            self._provisioning = asyncio.ensure_future(asyncio.to_thread(provisioner.provision))
        try:
            total = await asyncio.shield(self._provisioning)
        except KvProvisionError as exc:  # retryable (the name server or a broker was not ready)
            raise Refusal(ResponseCode.SYSTEM_BUSY, str(exc)) from None
        return kv_pb2.KvProvisionResponse(code=ResponseCode.SUCCESS, total_shards=total)

    # -- write -------------------------------------------------------------------------------------
    async def write(self, request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
        op = _OPS.get(request.op)
        if op is None:  # not require(): its message would be formatted for every write
            raise RequestError(f"KV op {request.op} is not PUT, DELETE or CAS")
        key = request.key
        checked(check_key, key)
        checked(check_value, request.value)
        if op is KvOp.CAS and not request.expect_absent:
            checked(check_value, request.expected, "expected value")
        return await self._write(op, request)

    async def _write(self, op: KvOp, request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
        kv = self._kv()
        key = request.key
        shard = shard_of(key, self.total_shards())
        ctx = self._context(shard)
        queue_id = self._writable_queue(shard, ctx)
        record = KvRecord(op, key, request.value if op is not KvOp.DELETE else b"",
                          None if request.expect_absent else request.expected)
        if op is KvOp.CAS and len(ctx.chain) > 1 and kv.state.get(queue_id, [key])[0] is None:
            record.base = (await self._older_get(kv, ctx, [key]))[0]
        props, body = record.encode()
        self._check_fits(record_size(_TOPIC_BYTES, len(props), len(body)), record.base)
        physical = await self._committed(kv, shard, queue_id, props, body)
        if op is not KvOp.CAS:
            return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=True)
        outcome = kv.dispatcher.take_outcome(physical)
        assert outcome is not None, "CAS applied without an outcome"
        current = outcome.current
        exists = current is not None and current[0] == PRESENT_TAG
        return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=outcome.applied, exists=exists,
                                      current=current[1:] if exists and current else b"")

    def _check_fits(self, size: int, base: bytes | None = None) -> None:
        """A record must fit one commitlog segment (records never straddle them): with small segments (say 1 MiB) a
        value below the KV limit may not. Checked before the record joins a group commit, whose one append it would
        fail for every writer in the group; the caller's to fix, not retryable. ``base``: a compare-and-set's copy
        of the key's state from the broker that led its shard before a remap, which the record carries too."""
        limit = self.store.commit_log.max_record_size()
        if size > limit:
            carried = "" if base is None else (
                f", and {len(base)} bytes of the key's value copied from the broker that led its shard before a "
                "remap (a put of the key needs no copy: after one, compare-and-sets carry none)")
            raise RequestError(f"KV record of {size} bytes (key, value and, for a compare-and-set, the expected value"
                               f"{carried}) exceeds {limit} bytes, the largest record broker {self.broker_name}'s "
                               f"commitlog takes (mappedFileSizeCommitLog={self.store.commit_log.mapped_file_size} "
                               "less 8): write a smaller value")

    def _writable_queue(self, shard: int, ctx: LogicQueueContext) -> int:
        """The physical queue this broker writes the shard's records to (Refusal when it cannot take writes)."""
        leader = ctx.leader
        if not leader.logic_offset_decided():  # mid-remap: the old leader may still take writes until fenced
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"shard {shard} of {KV_TOPIC} is moving to broker "
                          f"{leader.bname}; retry")
        return leader.queue_id

    async def _committed(self, kv: KvStore, shard: int, queue_id: int, props: bytes, body: bytes) -> int:
        """Write one record through the group commit; its commitlog offset once applied."""
        if self._group_commit is None:
            self._group_commit = KvGroupCommit(kv.waiters, self._append_group, APPLY_TIMEOUT_S)
        try:
            return await self._group_commit.submit(shard, queue_id, props, body)
        except TimeoutError:
            raise _not_applied_in_time() from None
        except StoreFailStopped as exc:
            raise _store_stopped(exc) from None

    def _append_group(self, shard: int, queue_id: int, properties: list[bytes], bodies: list[bytes]) -> AppendResult:
        # Checked again: the record waited in the group commit, and a remap may have fenced the shard meanwhile.
        if self._writable_queue(shard, self._context(shard)) != queue_id:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"shard {shard} of {KV_TOPIC} moved; retry")
        result = self.store.put_messages(KV_TOPIC, queue_id, bodies, properties, body_limit=MAX_BODY_BYTES,
                                         wait_flushed=False)
        if not result.ok or result.append is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"commitlog refused the write: {result.error}")
        return result.append

    @staticmethod
    async def _older_get(kv: KvStore, ctx: LogicQueueContext, keys: list[bytes],
                         found: list[bytes | None] | None = None) -> list[bytes | None]:
        """Older items of the chain, some on other brokers (PeerBrokerError when one cannot answer)."""
        return await REMOTE_WAITS.run(kv.reader.older_get, ctx.chain, keys, found or [None] * len(keys))

    def _partition(self, kv: KvStore, request: kv_pb2.KvGetRequest | kv_pb2.KvScanRequest) -> int:
        """A PHYSICAL request's partition (the KV topic's physical queue id on this broker), once every write it
        took here is applied (``broker/kv/kv_partition_fences.py``): a shard's new leader reads its base for a CAS,
        or a key it does not hold, there."""
        require(request.queue_id >= 0, f"queue id {request.queue_id} is negative: a PHYSICAL KV request names a "
                                       "partition of this broker")
        kv.fences.check_applied(request.queue_id)
        return request.queue_id

    # -- get ---------------------------------------------------------------------------------------
    async def get(self, request: kv_pb2.KvGetRequest) -> kv_pb2.KvGetResponse:
        keys = list(request.keys)
        if not 0 < len(keys) <= MAX_GET_KEYS:
            raise RequestError(f"{len(keys)} keys: a get takes 1..{MAX_GET_KEYS}")
        _check_keys(keys)
        kv = self._kv()
        if request.addressing == broker_pb2.PHYSICAL:  # a leader reading an older item: states as they are
            # (capped as any answer: a new leader asks an older item for all of a batch's keys it lacks)
            states = answered([raw or b"" for raw in kv.state.get(self._partition(kv, request), keys)])
        else:
            found = await self._logic_get(kv, keys)
            states = answered([b"" if raw is None or raw == DELETED else raw for raw in found])  # the rest: asked again
        remark = "" if len(states) == len(keys) else (
            f"{len(states)} of {len(keys)} keys answered (an answer holds at most {MAX_GET_ANSWER_BYTES >> 20} MiB): "
            "ask again for the others")
        if request.pack_states:
            return kv_pb2.KvGetResponse(code=ResponseCode.SUCCESS, remark=remark, packed_states=pack_states(states))
        return kv_pb2.KvGetResponse(code=ResponseCode.SUCCESS, remark=remark, states=states)

    async def _logic_get(self, kv: KvStore, keys: list[bytes]) -> list[bytes | None]:
        total = self.total_shards()
        # shard_of(key, total) of each key, without a Python call per key (a get takes up to MAX_GET_KEYS)
        shards = [crc % total for crc in map(zlib.crc32, keys)]
        contexts = {shard: self._context(shard) for shard in dict.fromkeys(shards)}
        queue_of = {shard: ctx.leader.queue_id for shard, ctx in contexts.items()}  # the partition read here
        partitions = list(map(queue_of.__getitem__, shards))
        states = kv.state.get_each(partitions, keys)  # one lookup for all shards
        for shard, ctx in contexts.items():
            if len(ctx.chain) > 1:  # a moved shard: what its leader does not hold may be on older items
                missing = [i for i, raw in enumerate(states) if raw is None and shards[i] == shard]
                if missing:
                    older = await self._older_get(kv, ctx, [keys[i] for i in missing])
                    for i, raw in zip(missing, older, strict=True):
                        states[i] = raw
        return states

    # -- scan --------------------------------------------------------------------------------------
    async def scan(self, request: kv_pb2.KvScanRequest) -> kv_pb2.KvScanResponse:
        checked(check_scan_limit, request.limit)
        if request.prefix:
            require(len(request.prefix) <= 1024, "prefix is longer than 1024 bytes")
        kv = self._kv()
        if request.addressing == broker_pb2.PHYSICAL:
            entries = kv.state.scan(self._partition(kv, request), request.prefix, request.start_after, request.limit)
            return self._scan_response(entries, len(entries) < request.limit)
        total = self.total_shards()
        require(0 <= request.shard < total, f"shard {request.shard} does not exist: shards are 0..{total - 1}")
        ctx = self._context(request.shard)
        args = (ctx.chain, request.shard, request.prefix, request.start_after, request.limit)
        if len(ctx.chain) == 1:
            entries, exhausted = kv.reader.scan(*args)
        else:  # older items may be on other brokers: off the event loop
            entries, exhausted = await REMOTE_WAITS.run(kv.reader.scan, *args)
        return self._scan_response(entries, exhausted)

    @staticmethod
    def _scan_response(entries: Entries, exhausted: bool) -> kv_pb2.KvScanResponse:
        return kv_pb2.KvScanResponse(code=ResponseCode.SUCCESS, exhausted=exhausted,
                                     entries=[to_entry(k, raw) for k, raw in entries])

    # -- snapshots ---------------------------------------------------------------------------------
    async def export_snapshot(self, request: kv_pb2.KvSnapshotRequest) -> AsyncIterator[kv_pb2.KvSnapshotChunk]:
        """A header, then the shard's live entries in key order (older items merged in)."""
        kv = self._kv()
        total = self.total_shards()
        require(0 <= request.shard < total, f"shard {request.shard} does not exist: shards are 0..{total - 1}")
        ctx = self._context(request.shard)
        offset, local = kv.state.snapshot(ctx.leader.queue_id)
        header = kv_pb2.KvSnapshotHeader(shard=request.shard, total_shards=total,
                                         broker_name=self.broker_name, commit_log_offset=offset,
                                         created_ms=int(time.time() * 1000))
        yield kv_pb2.KvSnapshotChunk(header=header)
        entries = kv.reader.merged_entries(ctx.chain, request.shard, local)
        sent = 0
        while chunk := await asyncio.to_thread(_take, entries, SNAPSHOT_CHUNK_ENTRIES):
            sent += len(chunk)
            yield kv_pb2.KvSnapshotChunk(entries=[kv_pb2.KvEntry(key=k, state=kv_pb2.KV_PRESENT, value=raw[1:])
                                                  for k, raw in chunk])
        log.info("kv_snapshot_exported shard=%d entries=%d commitlog_offset=%d", request.shard, sent, offset)

    async def import_snapshot(self, chunks: AsyncIterator[kv_pb2.KvSnapshotChunk]) -> kv_pb2.KvImportResponse:
        """Into a shard this broker leads and that holds nothing yet, or only entries of this snapshot (an import
        of it cut short, by a crash or a refused batch: the same import again writes the rest). The whole
        snapshot is read and checked before anything is written (a bad entry changes nothing); every entry is then
        written as a put through the commitlog, so the imported state is as durable (and replayable) as any
        write."""
        kv = self._kv()  # (before the snapshot is read: a broker without a KV store buffered it all to say so)
        received = await _received(chunks)
        problem = snapshot_shape_error(received)
        require(problem is None, problem or "")
        header = received[0].header
        total = self.total_shards()
        require(header.total_shards == total, f"the snapshot is of a KV store with {header.total_shards} "
                f"shards; this one has {total}")
        require(0 <= header.shard < total, f"shard {header.shard} does not exist: shards are 0..{total - 1}")
        entries = [e for chunk in received for e in chunk.entries]
        for entry in entries:
            checked(check_key, entry.key)
            checked(check_value, entry.value)
            require(shard_of(entry.key, total) == header.shard,
                    f"key {entry.key[:40]!r} is not in shard {header.shard}")
            self._check_fits(record_size(_TOPIC_BYTES, len(KvRecord(KvOp.PUT, entry.key).encode()[0]),
                                         len(FORMAT) + len(entry.value)))  # a put's record, as written below
        ctx = self._context(header.shard)
        args = (kv, ctx.chain, header.shard, {e.key: e.value for e in entries})
        # A shard moved before holds its older items on other brokers: read off the event loop.
        held = _held_of(*args) if len(ctx.chain) == 1 else await REMOTE_WAITS.run(_held_of, *args)
        if held is None:
            # The caller's choice of shard, not a broker fault: nothing was written.
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"shard {header.shard} already holds data on broker "
                          f"{self.broker_name}: import only into an empty shard (or the same snapshot again, "
                          "to finish an import of it cut short)")
        rest = [e for e in entries if e.key not in held]
        for start in range(0, len(rest), IMPORT_BATCH_ENTRIES):
            await self._import_batch(kv, header.shard, ctx, rest[start : start + IMPORT_BATCH_ENTRIES])
        log.info("kv_snapshot_imported shard=%d entries=%d held_before=%d from_broker=%s from_offset=%d",
                 header.shard, len(entries), len(held), header.broker_name, header.commit_log_offset)
        return kv_pb2.KvImportResponse(code=ResponseCode.SUCCESS, imported=len(entries))

    async def _import_batch(self, kv: KvStore, shard: int, ctx: LogicQueueContext,
                            entries: list[kv_pb2.KvEntry]) -> None:
        # Checked before each batch, as a write is (_append_group): a remap may have fenced the shard meanwhile (the
        # import is refused, and run again where the shard leads then).
        if self._writable_queue(shard, self._context(shard)) != ctx.leader.queue_id:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"shard {shard} of {KV_TOPIC} moved during the import: run it "
                          "again")
        encoded = [KvRecord(KvOp.PUT, e.key, e.value).encode() for e in entries]
        result = self.store.put_messages(KV_TOPIC, ctx.leader.queue_id, [b for _, b in encoded],
                                         [p for p, _ in encoded], body_limit=MAX_BODY_BYTES, wait_flushed=False)
        if not result.ok or result.append is None:
            raise Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"commitlog refused the import: {result.error}")
        await self._applied(kv, result.append.end_offset)

    @staticmethod
    async def _applied(kv: KvStore, end_offset: int) -> None:
        try:
            async with asyncio.timeout(APPLY_TIMEOUT_S):
                await kv.waiters.wait(end_offset)
        except TimeoutError:
            raise _not_applied_in_time() from None
        except StoreFailStopped as exc:
            raise _store_stopped(exc) from None


async def _received(chunks: AsyncIterator[kv_pb2.KvSnapshotChunk]) -> list[kv_pb2.KvSnapshotChunk]:
    """The snapshot's chunks, up to ``MAX_IMPORT_BYTES`` (past it, INVALID_ARGUMENT: the broker holds the whole
    snapshot while it checks it, and a client could make that as large as it liked)."""
    received: list[kv_pb2.KvSnapshotChunk] = []
    size = 0
    async for chunk in chunks:
        size += chunk.ByteSize()
        require(size <= MAX_IMPORT_BYTES, f"a snapshot imported at once is at most {MAX_IMPORT_BYTES >> 20} MiB: "
                "a KV store of more shards has smaller ones")
        received.append(chunk)
    return received


def _held_of(kv: KvStore, chain: list[LogicQueueMappingItem], shard: int,
             snapshot: dict[bytes, bytes]) -> set[bytes] | None:
    """The keys the shard holds, on any item of its chain (a shard moved before: its older items too), if each holds
    the snapshot's value for it (nothing, or what an import of the snapshot cut short wrote); None if any holds
    anything else (a deletion included). A moved empty shard was refused as holding data."""
    held: set[bytes] = set()
    for item in chain:
        after = b""
        while page := kv.reader.item_scan(item, shard, b"", after, IMPORT_BATCH_ENTRIES):
            for key, raw in page:
                value = value_of(raw)
                if value is None or snapshot.get(key) != value:
                    return None
                held.add(key)
            after = page[-1][0]
    return held


def _not_applied_in_time() -> Refusal:
    # A system fault, and not SYSTEM_BUSY: clients retry that, and a retried CAS could see its own write.
    return Refusal(ResponseCode.SYSTEM_ERROR, f"written but not applied within {APPLY_TIMEOUT_S:.0f} s; "
                   "the write may still apply")


def _store_stopped(exc: StoreFailStopped) -> Refusal:
    return Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"written, not applied yet, and the store stopped "
                   f"taking writes: the write may still apply (after a restart); {exc}")


def _take(entries, n: int, max_bytes: int = SNAPSHOT_CHUNK_BYTES) -> list[tuple[bytes, bytes]]:
    """The next chunk: ``n`` entries, fewer once they hold ``max_bytes`` (an answer's frame is bounded: 1,000
    values of 300 KB failed the export with RESOURCE_EXHAUSTED, with no way to ask for smaller chunks)."""
    out = []
    size = 0
    for item in entries:
        out.append(item)
        size += len(item[0]) + len(item[1])
        if len(out) >= n or size >= max_bytes:
            break
    return out
