"""The jobs' view of one broker's tier: metadata snapshots and the calls that change it (the broker owns
tiered metadata; jobs never write it directly)."""

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from broker.tiered.provider.s3_file_segment import S3Config
from common.acl import key_pair, signed_channel, signer_of
from common.response_code import ResponseCode, code_name
from proto import broker_pb2_grpc, common_pb2, tiered_pb2, tiered_pb2_grpc
from spark_jobs.tier_objects import TierLocation

COMMIT_LOG, CONSUME_QUEUE = 0, 1
OPEN, SEALED, EXPIRED = 0, 1, 2
RPC_TIMEOUT_S = 60.0
RESERVE_KEY = "tieredStoreFileReservedTime"  # hours the broker keeps tiered segments (its expiry's reserve time)
HOUR_MS = 3600 * 1000


class TierJobError(RuntimeError):
    """A job step failed; the message says which and why."""


class TierRefused(TierJobError):
    """The broker answered the step with a refusal (a full disk, say): it did nothing. Unlike a call that got no
    answer (the broker may have done it), a job may undo its own part of the step."""


@dataclass(frozen=True, slots=True)
class TierSnapshot:
    broker_name: str
    provider: TieredBackendServiceProvider
    root: Path
    segments: list[tiered_pb2.TieredSegment]
    snapshot_ms: int
    location: TierLocation  # what executors need to reach the objects (posix: the directory ``root``)

    def by_file(self) -> dict[tuple[str, int, int], list[tiered_pb2.TieredSegment]]:
        """Readable segments per (topic, queue, type), in offset order."""
        out: dict[tuple[str, int, int], list[tiered_pb2.TieredSegment]] = {}
        for s in self.segments:
            if s.status != EXPIRED:
                out.setdefault((s.topic, s.queue_id, s.type), []).append(s)
        for segs in out.values():
            segs.sort(key=lambda s: s.base_offset)
        return out


@dataclass(frozen=True, slots=True)
class S3Access:
    """What a job adds to the broker's s3 settings: the signing keys (the broker never sends them) and, where
    the job reaches the server by another address than the broker does, the endpoint."""

    endpoint: str = ""
    access_key: str = ""
    secret_key: str = ""


def add_s3_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--s3-endpoint", default="", help="S3 endpoint as this job reaches it (default: the broker's)")
    parser.add_argument("--s3-access-key", default=os.environ.get("AWS_ACCESS_KEY_ID", ""),
                        help="S3 access key for an s3 tier (default $AWS_ACCESS_KEY_ID)")
    parser.add_argument("--s3-secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                        help="S3 secret key for an s3 tier (default $AWS_SECRET_ACCESS_KEY)")


def s3_access(args: argparse.Namespace) -> S3Access:
    return S3Access(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)


def add_acl_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--access-key", default=os.environ.get("ROCKETMQ_ACCESS_KEY", ""),
                        help="ACL access key the job's calls to the broker are signed with, for a broker with ACL on "
                             "(default $ROCKETMQ_ACCESS_KEY)")
    parser.add_argument("--secret-key", default=os.environ.get("ROCKETMQ_SECRET_KEY", ""),
                        help="its secret key (default $ROCKETMQ_SECRET_KEY)")


def acl_credentials(args: argparse.Namespace) -> tuple[str, str] | None:
    """(access key, secret key), None when neither is given; TierJobError when only one is, or a bad one."""
    try:
        return key_pair(args.access_key, args.secret_key)
    except ValueError as exc:
        raise TierJobError(str(exc)) from None


def broker_channel(addr: str, credentials: tuple[str, str] | None = None) -> grpc.Channel:
    """A plaintext channel to a broker, every call signed with ``credentials`` (a broker with ACL on)."""
    channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 512 << 20)])
    return signed_channel(channel, signer_of(credentials))


class BrokerTier:
    def __init__(self, addr: str, s3: S3Access | None = None, credentials: tuple[str, str] | None = None) -> None:
        self.addr = addr
        self.s3 = s3 or S3Access()
        self._channel = broker_channel(addr, credentials)
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
            raise TierRefused(f"{what} at broker {self.addr}: {code_name(response.code)}: {response.remark}")
        return response

    def snapshot(self, topic: str = "") -> TierSnapshot:
        r = self._call("tiered metadata", "GetTieredMetadata", tiered_pb2.TieredMetadataRequest(topic=topic))
        try:
            provider = TieredBackendServiceProvider(r.backend_provider)
        except ValueError:
            raise TierJobError(f"broker {r.broker_name} at {self.addr} keeps its tier in an unknown backend "
                               f"{r.backend_provider!r}") from None
        s3 = None
        if provider is TieredBackendServiceProvider.S3:
            s3 = S3Config(r.s3_bucket, self.s3.endpoint or r.s3_endpoint, r.s3_region, self.s3.access_key,
                          self.s3.secret_key)
        return TierSnapshot(r.broker_name, provider, Path(r.backend_root), list(r.segments), r.snapshot_ms,
                            TierLocation(provider, r.backend_root, s3))

    def reserve_ms(self) -> int:
        """How long the broker keeps a tiered segment after its last message (``tieredStoreFileReservedTime``): its
        clean pass marks older ones EXPIRED whenever it runs, jobs or not."""
        try:
            table = broker_pb2_grpc.BrokerServiceStub(self._channel).GetBrokerConfig(common_pb2.Empty(),
                                                                                      timeout=RPC_TIMEOUT_S).table
        except grpc.RpcError as exc:
            raise TierJobError(f"broker config at broker {self.addr}: {exc.code().name}: {exc.details()} (give "
                               "the reserve time with --reserve-hours)") from None
        try:
            return int(float(table[RESERVE_KEY]) * HOUR_MS)
        except (KeyError, ValueError):
            raise TierJobError(f"broker at {self.addr} shows no {RESERVE_KEY} (give the reserve time with "
                               "--reserve-hours)") from None

    def replace(self, old: list[tiered_pb2.TieredSegment], merged: tiered_pb2.TieredSegment) -> bool:
        """True if the broker swapped them; False if they changed since the snapshot (nothing done).
        :class:`TierRefused` for another refusal (nothing done either)."""
        r = self._call("segment replacement", "ReplaceSegments", tiered_pb2.ReplaceSegmentsRequest(old=old,
                                                                                                 merged=merged))
        return r.code == ResponseCode.SUCCESS

    def mark_expired(self) -> list[tiered_pb2.TieredSegment]:
        return list(self._call("marking expired segments", "MarkExpiredSegments",
                               tiered_pb2.MarkExpiredRequest()).segments)

    def drop(self, segments: list[tiered_pb2.TieredSegment]) -> int:
        return self._call("dropping segment records", "DropSegments",
                          tiered_pb2.DropSegmentsRequest(segments=segments)).dropped
