"""KV requests: writes through the commitlog (answered once applied), reads from the applied state.

A client addresses a key's shard (LOGIC: this broker must lead it); leaders read older items of a shard on
other brokers with PHYSICAL requests naming the partition (the physical queue). See broker/kv/.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from broker.kv.kv_chain_reader import Entries, to_entry
from broker.kv.kv_record import DELETED, MAX_BODY_BYTES, PRESENT_TAG, KvOp, KvRecord
from broker.out.peer_brokers import PeerBrokerError
from broker.request_error import RequestError, require
from broker.statictopic.logic_queue_context import LogicQueueContext, NotLeaderError
from common.kv_shard import (
    KV_TOPIC,
    MAX_GET_KEYS,
    KvInputError,
    check_key,
    check_scan_limit,
    check_value,
    shard_of,
)
from common.response_code import ResponseCode
from proto import broker_pb2, kv_pb2

if TYPE_CHECKING:
    from broker.broker_controller import BrokerController
    from broker.kv.kv_store import KvStore

log = logging.getLogger(__name__)

APPLY_TIMEOUT_S = 10.0
SNAPSHOT_CHUNK_ENTRIES = 1000
IMPORT_BATCH_ENTRIES = 1000
_OPS = {kv_pb2.KV_PUT: KvOp.PUT, kv_pb2.KV_DELETE: KvOp.DELETE, kv_pb2.KV_CAS: KvOp.CAS}


class KvRefusal(Exception):
    """A business outcome that ends a KV request: a response code and a remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def checked(check: Callable[..., None], *args: object) -> None:
    try:
        check(*args)
    except KvInputError as exc:
        raise RequestError(str(exc)) from None


class KvProcessor:
    def __init__(self, controller: "BrokerController") -> None:
        self.c = controller

    # -- where a request goes ----------------------------------------------------------------------
    def _kv(self) -> "KvStore":
        kv = self.c.kv
        if kv is None:
            raise KvRefusal(ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"the KV store is off on broker {self.c.config.broker_name} (kvEnable=false)")
        return kv

    def total_shards(self) -> int:
        detail = self.c.topic_queue_mapping_manager.get(KV_TOPIC)
        if detail is None:
            raise KvRefusal(ResponseCode.TOPIC_NOT_EXIST, f"the KV store is not initialised on broker "
                            f"{self.c.config.broker_name}: run mqadmin kvInit")
        return detail.total_queues

    def _context(self, shard: int) -> LogicQueueContext:
        try:
            ctx = self.c.static_topics.context(KV_TOPIC, shard, broker_pb2.LOGIC)
        except NotLeaderError as exc:
            raise KvRefusal(ResponseCode.NOT_LEADER_FOR_QUEUE, str(exc)) from None
        assert ctx is not None
        return ctx

    # -- write -------------------------------------------------------------------------------------
    async def write(self, request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
        op = _OPS.get(request.op)
        require(op is not None, f"KV op {request.op} is not PUT, DELETE or CAS")
        assert op is not None
        key = request.key
        checked(check_key, key)
        checked(check_value, request.value)
        if op is KvOp.CAS and not request.expect_absent:
            checked(check_value, request.expected, "expected value")
        try:
            return await self._write(op, request)
        except KvRefusal as refusal:
            return kv_pb2.KvWriteResponse(code=refusal.code, remark=str(refusal))

    async def _write(self, op: KvOp, request: kv_pb2.KvWriteRequest) -> kv_pb2.KvWriteResponse:
        kv = self._kv()
        key = request.key
        shard = shard_of(key, self.total_shards())
        ctx = self._context(shard)
        leader = ctx.leader
        if not leader.logic_offset_decided():  # mid-remap: the old leader may still take writes until fenced
            raise KvRefusal(ResponseCode.SYSTEM_BUSY, f"shard {shard} of {KV_TOPIC} is moving to broker "
                            f"{leader.bname}; retry")
        record = KvRecord(op, key, request.value if op is not KvOp.DELETE else b"",
                          None if request.expect_absent else request.expected)
        if op is KvOp.CAS and len(ctx.chain) > 1 and kv.state.get(leader.queue_id, [key])[0] is None:
            record.base = (await self._older_get(kv, ctx, [key]))[0]
        props, body = record.encode()
        result = self.c.store.put_messages(KV_TOPIC, leader.queue_id, [body], [props], body_limit=MAX_BODY_BYTES,
                                           wait_flushed=False)
        if not result.ok or result.append is None:
            raise KvRefusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"commitlog refused the write: {result.error}")
        await self._applied(kv, result.append.end_offset)
        if op is not KvOp.CAS:
            return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=True)
        outcome = kv.dispatcher.take_outcome(result.append.physical_offsets[0])
        assert outcome is not None, "CAS applied without an outcome"
        current = outcome.current
        exists = current is not None and current[0] == PRESENT_TAG
        return kv_pb2.KvWriteResponse(code=ResponseCode.SUCCESS, applied=outcome.applied, exists=exists,
                                      current=current[1:] if exists and current else b"")

    async def _older_get(self, kv: "KvStore", ctx: LogicQueueContext, keys: list[bytes],
                         found: list[bytes | None] | None = None) -> list[bytes | None]:
        try:
            return await asyncio.to_thread(kv.reader.older_get, ctx.chain, keys, found or [None] * len(keys))
        except PeerBrokerError as exc:
            raise KvRefusal(ResponseCode.SYSTEM_ERROR, str(exc)) from None

    # -- get ---------------------------------------------------------------------------------------
    async def get(self, request: kv_pb2.KvGetRequest) -> kv_pb2.KvGetResponse:
        keys = list(request.keys)
        require(0 < len(keys) <= MAX_GET_KEYS, f"{len(keys)} keys: a get takes 1..{MAX_GET_KEYS}")
        for key in keys:
            checked(check_key, key)
        try:
            kv = self._kv()
            if request.addressing == broker_pb2.PHYSICAL:  # a leader reading an older item: states as they are
                states = kv.state.get(request.queue_id, keys)
                return kv_pb2.KvGetResponse(code=ResponseCode.SUCCESS, states=[raw or b"" for raw in states])
            states = await self._logic_get(kv, keys)
        except KvRefusal as refusal:
            return kv_pb2.KvGetResponse(code=refusal.code, remark=str(refusal))
        return kv_pb2.KvGetResponse(code=ResponseCode.SUCCESS,
                                    states=[b"" if raw is None or raw == DELETED else raw for raw in states])

    async def _logic_get(self, kv: "KvStore", keys: list[bytes]) -> list[bytes | None]:
        total = self.total_shards()
        by_shard: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            by_shard.setdefault(shard_of(key, total), []).append(i)
        states: list[bytes | None] = [None] * len(keys)
        for shard, slots in by_shard.items():
            ctx = self._context(shard)
            shard_keys = [keys[i] for i in slots]
            found = kv.state.get(ctx.leader.queue_id, shard_keys)
            if len(ctx.chain) > 1 and None in found:
                found = await self._older_get(kv, ctx, shard_keys, found)
            for i, raw in zip(slots, found, strict=True):
                states[i] = raw
        return states

    # -- scan --------------------------------------------------------------------------------------
    async def scan(self, request: kv_pb2.KvScanRequest) -> kv_pb2.KvScanResponse:
        checked(check_scan_limit, request.limit)
        if request.prefix:
            require(len(request.prefix) <= 1024, "prefix is longer than 1024 bytes")
        try:
            kv = self._kv()
            if request.addressing == broker_pb2.PHYSICAL:
                entries = kv.state.scan(request.queue_id, request.prefix, request.start_after, request.limit)
                return self._scan_response(entries, len(entries) < request.limit)
            total = self.total_shards()
            require(0 <= request.shard < total, f"shard {request.shard} does not exist: shards are 0..{total - 1}")
            ctx = self._context(request.shard)
            args = (ctx.chain, request.shard, request.prefix, request.start_after, request.limit)
            if len(ctx.chain) == 1:
                entries, exhausted = kv.reader.scan(*args)
            else:
                entries, exhausted = await asyncio.to_thread(kv.reader.scan, *args)
        except KvRefusal as refusal:
            return kv_pb2.KvScanResponse(code=refusal.code, remark=str(refusal))
        except PeerBrokerError as exc:
            return kv_pb2.KvScanResponse(code=ResponseCode.SYSTEM_ERROR, remark=str(exc))
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
                                         broker_name=self.c.config.broker_name, commit_log_offset=offset,
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
        """Into a shard this broker leads and that holds nothing yet. The whole snapshot is read and checked
        before anything is written (a bad entry changes nothing); every entry is then written as a put through
        the commitlog, so the imported state is as durable (and replayable) as any write."""
        received = [chunk async for chunk in chunks]
        require(bool(received) and received[0].HasField("header"), "a snapshot starts with a header chunk")
        header = received[0].header
        try:
            kv = self._kv()
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
            ctx = self._context(header.shard)
            if len(ctx.chain) > 1 or kv.state.scan(ctx.leader.queue_id, b"", b"", 1):
                raise KvRefusal(ResponseCode.SYSTEM_ERROR, f"shard {header.shard} already holds data on broker "
                                f"{self.c.config.broker_name}: import only into an empty shard")
            for start in range(0, len(entries), IMPORT_BATCH_ENTRIES):
                await self._import_batch(kv, ctx, entries[start : start + IMPORT_BATCH_ENTRIES])
        except KvRefusal as refusal:
            return kv_pb2.KvImportResponse(code=refusal.code, remark=str(refusal))
        log.info("kv_snapshot_imported shard=%d entries=%d from_broker=%s from_offset=%d", header.shard,
                 len(entries), header.broker_name, header.commit_log_offset)
        return kv_pb2.KvImportResponse(code=ResponseCode.SUCCESS, imported=len(entries))

    async def _import_batch(self, kv: "KvStore", ctx: LogicQueueContext, entries: list[kv_pb2.KvEntry]) -> None:
        encoded = [KvRecord(KvOp.PUT, e.key, e.value).encode() for e in entries]
        result = self.c.store.put_messages(KV_TOPIC, ctx.leader.queue_id, [b for _, b in encoded],
                                           [p for p, _ in encoded], body_limit=MAX_BODY_BYTES, wait_flushed=False)
        if not result.ok or result.append is None:
            raise KvRefusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"commitlog refused the import: {result.error}")
        await self._applied(kv, result.append.end_offset)

    async def _applied(self, kv: "KvStore", end_offset: int) -> None:
        try:
            async with asyncio.timeout(APPLY_TIMEOUT_S):
                await kv.waiters.wait(end_offset)
        except TimeoutError:
            raise KvRefusal(ResponseCode.SYSTEM_ERROR, f"written but not applied within {APPLY_TIMEOUT_S:.0f} s; "
                            "the write may still apply") from None


def _take(entries, n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for item in entries:
        out.append(item)
        if len(out) >= n:
            break
    return out
