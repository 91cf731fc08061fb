"""The jobs' view of one broker's tier: metadata snapshots and the calls that change it (the broker owns
tiered metadata; jobs never write it directly)."""

from dataclasses import dataclass
from pathlib import Path

import grpc

from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from common.response_code import ResponseCode, code_name
from proto import tiered_pb2, tiered_pb2_grpc

COMMIT_LOG, CONSUME_QUEUE = 0, 1
OPEN, SEALED, EXPIRED = 0, 1, 2
RPC_TIMEOUT_S = 60.0


class TierJobError(RuntimeError):
    """A job step failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class TierSnapshot:
    broker_name: str
    provider: TieredBackendServiceProvider
    root: Path
    segments: list[tiered_pb2.TieredSegment]
    snapshot_ms: int

    def by_file(self) -> dict[tuple[str, int, int], list[tiered_pb2.TieredSegment]]:
        """Readable segments per (topic, queue, type), in offset order."""
        out: dict[tuple[str, int, int], list[tiered_pb2.TieredSegment]] = {}
        for s in self.segments:
            if s.status != EXPIRED:
                out.setdefault((s.topic, s.queue_id, s.type), []).append(s)
        for segs in out.values():
            segs.sort(key=lambda s: s.base_offset)
        return out


class BrokerTier:
    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 512 << 20)])
        self._stub = tiered_pb2_grpc.TieredServiceStub(self._channel)

    def __enter__(self) -> "BrokerTier":
        return self

    def __exit__(self, *exc: object) -> None:
        self._channel.close()

    def _call(self, what: str, method: str, request):
        try:
            response = getattr(self._stub, method)(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise TierJobError(f"{what} at broker {self.addr}: {exc.code().name}: {exc.details()}") from None
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY):
            raise TierJobError(f"{what} at broker {self.addr}: {code_name(response.code)}: {response.remark}")
        return response

    def snapshot(self, topic: str = "") -> TierSnapshot:
        r = self._call("tiered metadata", "GetTieredMetadata", tiered_pb2.TieredMetadataRequest(topic=topic))
        try:
            provider = TieredBackendServiceProvider(r.backend_provider)
        except ValueError:
            raise TierJobError(f"broker {r.broker_name} at {self.addr} keeps its tier in an unknown backend "
                               f"{r.backend_provider!r}") from None
        return TierSnapshot(r.broker_name, provider, Path(r.backend_root), list(r.segments), r.snapshot_ms)

    def replace(self, old: list[tiered_pb2.TieredSegment], merged: tiered_pb2.TieredSegment) -> bool:
        """True if the broker swapped them; False if they changed since the snapshot (nothing done)."""
        r = self._call("segment replacement", "ReplaceSegments", tiered_pb2.ReplaceSegmentsRequest(old=old,
                                                                                                 merged=merged))
        return r.code == ResponseCode.SUCCESS

    def mark_expired(self) -> list[tiered_pb2.TieredSegment]:
        return list(self._call("marking expired segments", "MarkExpiredSegments",
                               tiered_pb2.MarkExpiredRequest()).segments)

    def drop(self, segments: list[tiered_pb2.TieredSegment]) -> int:
        return self._call("dropping segment records", "DropSegments",
                          tiered_pb2.DropSegmentsRequest(segments=segments)).dropped
