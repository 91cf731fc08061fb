"""``python -m spark_jobs.compact --broker ADDR [--master local[2]] [--topic T]``: merge runs of small sealed
segments of each queue (commitlog and consume queue) into larger objects.

1. Ask the broker for a metadata snapshot; delete garbage (objects nothing references, older than the grace
   period: parts retired by earlier runs, merged objects a crashed run never committed).
2. Plan: per queue and type, consecutive sealed segments below ``--small-bytes`` (never the last one), grouped
   up to ``--target-bytes``. Segments the broker's expiry may reach before the run ends (their last message older
   than the reserve time, ``tieredStoreFileReservedTime``, less ``--expiry-margin-seconds``) are left out: its clean
   pass marks the oldest EXPIRED while the job runs, and a group holding one is refused whole (every queue's group
   began with its oldest segment, so no run under a short reserve merged anything).
3. Executors read each group's parts in parallel, verify the concatenation (for a commitlog every record's
   structure, CRC and queue), write it under a new unique name (fsynced; on an s3 tier one PUT through the
   broker's own S3 backend, so executors need no shared directory) and check its length in the tier.
4. The driver retires the parts (a marker with the time) and asks the broker to swap the group's records for
   the merged one in one compare-and-swap; if anything changed since the snapshot (another run swapped them, a
   cleanup dropped them) the swap is refused and the merged object is removed: the group counts as changed, not
   failed (the run still exits 0). Its markers stay: the other run's, if it swapped the parts, keep them for its
   grace period; a later collection removes those of parts still in use. Offsets never change (the merged object
   holds the same bytes). A swap refused otherwise (the broker's disk is full, say) is withdrawn (object and
   markers removed) and ends the run, after the merged objects of the groups not yet offered are deleted too: the
   next run collects only the parts of groups swapped before it. (A swap that got no answer is left as it is:
   the broker may have made it; the next run's snapshot decides.)
5. After ``--grace-seconds`` (longer than any read), retired parts are deleted.
"""

import argparse
import logging
import sys
import time
from dataclasses import dataclass

from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from proto import tiered_pb2
from spark_jobs import tier_objects
from spark_jobs.broker_tier import (
    HOUR_MS,
    SEALED,
    BrokerTier,
    S3Access,
    TierJobError,
    TierRefused,
    TierSnapshot,
    acl_credentials,
    add_acl_arguments,
    add_s3_arguments,
    s3_access,
)
from spark_jobs.job_output import error_of, fail, summary

log = logging.getLogger("spark_jobs.compact")

# How long a run may take from its snapshot to its last swap: what expires within it is not planned. Far above the
# runs seen (a minute for thousands of segments); a day's reserve loses under a twentieth of its segments to it.
EXPIRY_MARGIN_S = 3600.0


@dataclass(frozen=True, slots=True)
class MergeTask:
    root: tier_objects.Tier  # a posix directory or the tier's location
    parts: list[bytes]  # serialized TieredSegment records, in offset order
    merged_path: str


@dataclass(frozen=True, slots=True)
class MergeResult:
    task: MergeTask
    size: int
    records: int
    error: str = ""


def expiry_cutoff(snapshot: TierSnapshot, reserve_ms: int, margin_s: float) -> int:
    """Segments whose last message is older than this (``end_ms`` below it) may be marked EXPIRED by the broker
    before a run that took ``snapshot`` ends (it expires those older than its clock less the reserve time)."""
    return snapshot.snapshot_ms + int(margin_s * 1000) - reserve_ms


def plan(snapshot: TierSnapshot, small_bytes: int, target_bytes: int, expiring_before_ms: int = 0,
         ) -> list[list[tiered_pb2.TieredSegment]]:
    """Groups to merge; segments ending before ``expiring_before_ms`` (see :func:`expiry_cutoff`) are in none."""
    groups = []
    for segments in snapshot.by_file().values():
        run: list[tiered_pb2.TieredSegment] = []
        size = 0
        for s in segments[:-1]:  # never the newest: it may still take appends
            small = s.status == SEALED and s.size < small_bytes and s.end_ms >= expiring_before_ms
            follows = bool(run) and run[-1].base_offset + run[-1].size == s.base_offset
            if small and follows and size + s.size <= target_bytes:
                run.append(s)
                size += s.size
                continue
            if len(run) >= 2:
                groups.append(run)
            run, size = ([s], s.size) if small else ([], 0)
        if len(run) >= 2:
            groups.append(run)
    return groups


def merge(task: MergeTask) -> MergeResult:
    """On an executor: concatenate, write, verify. Never raises (the driver decides)."""
    root = task.root
    parts = [tiered_pb2.TieredSegment.FromString(p) for p in task.parts]
    try:
        data = b"".join(tier_objects.read_run(root, [(p.path, p.size) for p in parts]))
        expected = sum(p.size for p in parts)
        records = tier_objects.verify(data, parts[0].type, parts[0].base_offset, expected,  # the bytes written
                                      (parts[0].topic, parts[0].queue_id))
        tier_objects.write_object(root, task.merged_path, data)  # fsynced
        written = tier_objects.object_size(root, task.merged_path)
        if written != expected:
            raise tier_objects.CorruptObjectError(f"{written} bytes in the tier, {expected} expected")
        return MergeResult(task, written, records)
    except Exception as exc:  # reported per group; the others go on
        tier_objects.delete_object(root, task.merged_path)
        return MergeResult(task, 0, 0, f"{type(exc).__name__}: {exc}")


def merged_record(parts: list[tiered_pb2.TieredSegment], path: str) -> tiered_pb2.TieredSegment:
    now = int(time.time() * 1000)
    first = parts[0]
    return tiered_pb2.TieredSegment(
        path=path, type=first.type, topic=first.topic, queue_id=first.queue_id, base_offset=first.base_offset,
        size=sum(p.size for p in parts), status=SEALED, create_ms=now,
        begin_ms=min((p.begin_ms for p in parts if p.begin_ms), default=0), end_ms=max(p.end_ms for p in parts),
        seal_ms=now)


def collect_garbage(tier: BrokerTier, grace_s: float) -> tuple[int, int]:
    """Delete unreferenced objects past the grace period; returns (objects, bytes)."""
    snapshot = tier.snapshot()
    referenced = {s.path for s in snapshot.segments}
    paths = tier_objects.garbage(snapshot.location, snapshot.broker_name, referenced, grace_s)
    freed = tier_objects.delete_objects(snapshot.location, paths)
    return len(paths), freed


def run(broker: str, master: str | None, topic: str, small_bytes: int, target_bytes: int,
        grace_s: float, wait_grace: bool, s3: S3Access | None = None, reserve_ms: int | None = None,
        expiry_margin_s: float | None = None, credentials: tuple[str, str] | None = None) -> dict[str, float]:
    """``reserve_ms``: the broker's (asked) if None; ``expiry_margin_s``: :data:`EXPIRY_MARGIN_S` if None."""
    from spark_jobs.session import spark_session

    started = time.monotonic()
    with BrokerTier(broker, s3, credentials) as tier:
        if tier.snapshot(topic).provider is TieredBackendServiceProvider.MEMORY:
            raise TierJobError(f"broker at {broker} keeps its tier in memory: compaction needs the posix or s3 "
                               "backend (executors read and write the objects)")
        reserve_ms = tier.reserve_ms() if reserve_ms is None else reserve_ms
        margin_s = EXPIRY_MARGIN_S if expiry_margin_s is None else expiry_margin_s
        gc_objects, gc_bytes = collect_garbage(tier, grace_s)
        snapshot = tier.snapshot(topic)
        cutoff = expiry_cutoff(snapshot, reserve_ms, margin_s)
        groups = plan(snapshot, small_bytes, target_bytes, cutoff)
        root: tier_objects.Tier = snapshot.location if snapshot.location.is_s3 else str(snapshot.root)
        tasks = [MergeTask(root, [p.SerializeToString() for p in g], tier_objects.merged_name(g[0].path))
                 for g in groups]
        expiring = sum(1 for s in snapshot.segments if s.status == SEALED and s.end_ms < cutoff)
        log.info("compact_planned broker=%s segments=%d groups=%d expiring_left_out=%d reserve_ms=%d margin_s=%g",
                 snapshot.broker_name, len(snapshot.segments), len(groups), expiring, reserve_ms, margin_s)
        results: list[MergeResult] = []
        if tasks:
            spark = spark_session("tiered-compact", master)
            sc = spark.sparkContext
            stage_started = time.monotonic()
            results = sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4))).map(merge).collect()
            log.info("compact_merge_stage groups=%d seconds=%.1f", len(tasks), time.monotonic() - stage_started)
        commits_started = time.monotonic()
        counts = commit_all(tier, snapshot.location, root, results)
        log.info("compact_committed merged=%d failed=%d changed=%d seconds=%.1f", counts.merged, counts.failed,
                 counts.changed, time.monotonic() - commits_started)
        deleted = 0
        if wait_grace and counts.merged:
            time.sleep(grace_s + 0.1)
            collect_started = time.monotonic()
            deleted, _ = collect_garbage(tier, grace_s)
            log.info("compact_retired_deleted objects=%d seconds=%.1f", deleted, time.monotonic() - collect_started)
    return {"segments_read": counts.read, "groups_merged": counts.merged, "groups_failed": counts.failed,
            "groups_changed": counts.changed, "bytes": counts.merged_bytes, "deleted": deleted + gc_objects,
            "garbage_bytes": gc_bytes, "seconds": time.monotonic() - started}


@dataclass(slots=True)
class CommitCounts:
    read: int = 0  # parts
    merged: int = 0  # groups swapped
    failed: int = 0  # groups whose merge failed: the run exits 1
    changed: int = 0  # groups whose parts changed since the snapshot (another run, a cleanup): the next run's
    merged_bytes: int = 0


def commit_all(tier: BrokerTier, location: tier_objects.Tier, root: tier_objects.Tier,
               results: list[MergeResult]) -> CommitCounts:
    """Offer each merged group to the broker, in order; a refusal other than "changed" ends the run."""
    counts = CommitCounts()
    for n, result in enumerate(results):
        parts = [tiered_pb2.TieredSegment.FromString(p) for p in result.task.parts]
        counts.read += len(parts)
        if result.error:
            counts.failed += 1
            log.warning("compact_group_failed first=%s error=%s", parts[0].path, result.error)
            continue
        try:
            swapped = commit(tier, location, parts, result.task.merged_path)
        except Exception:  # the run ends here: what it never offered the broker goes
            delete_unoffered(root, results[n + 1 :])
            raise
        if swapped:
            counts.merged += 1
            counts.merged_bytes += result.size
        else:
            counts.changed += 1
            log.info("compact_group_changed first=%s reason=changed_since_snapshot", parts[0].path)
    return counts


def commit(tier: BrokerTier, root: tier_objects.Tier, parts: list[tiered_pb2.TieredSegment], merged_path: str) -> bool:
    paths = [p.path for p in parts]
    tier_objects.on_each_object(tier_objects.retire, root, paths)  # every marker written before the swap
    try:
        swapped = tier.replace(parts, merged_record(parts, merged_path))
    except TierRefused:  # answered: nothing was swapped (no answer at all leaves it be: the broker may have)
        withdraw(root, paths, merged_path)
        raise
    if not swapped:  # the parts changed since the snapshot: another run may have swapped them and retired them
        tier_objects.delete_object(root, merged_path)  # (markers on parts still in use go with a later collection)
    return swapped


def withdraw(root: tier_objects.Tier, paths: list[str], merged_path: str) -> None:
    """A swap refused for another reason than a change (a full disk): the job leaves no trace of it."""
    tier_objects.on_each_object(tier_objects.unretire, root, paths)
    tier_objects.delete_object(root, merged_path)


def delete_unoffered(root: tier_objects.Tier, results: list[MergeResult]) -> None:
    """The merged objects of groups the run stops before offering to the broker (a failed merge left none)."""
    tier_objects.on_each_object(tier_objects.delete_object, root,
                                [r.task.merged_path for r in results if not r.error])


def main(argv: list[str] | None = None) -> int:
    # Executors get functions by reference to this module; run as ``python -m`` it is ``__main__``, whose
    # functions Spark would pickle by value: call through the imported module instead.
    from spark_jobs import compact as job

    parser = argparse.ArgumentParser(prog="spark_jobs.compact", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True, help="broker address HOST:PORT")
    parser.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's wins)")
    parser.add_argument("--topic", default="", help="only this topic")
    parser.add_argument("--small-bytes", type=int, default=16 << 20, help="segments below this are merged")
    parser.add_argument("--target-bytes", type=int, default=256 << 20, help="largest merged object")
    parser.add_argument("--grace-seconds", type=float, default=30.0, help="retired parts outlive this")
    parser.add_argument("--no-wait", action="store_true", help="leave retired parts to the next run's cleanup")
    parser.add_argument("--reserve-hours", type=float, default=None,
                        help="the broker's tieredStoreFileReservedTime (default: asked from the broker)")
    parser.add_argument("--expiry-margin-seconds", type=float, default=EXPIRY_MARGIN_S,
                        help="segments the broker expires within this are not merged (longer than a run)")
    add_s3_arguments(parser)
    add_acl_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    try:
        reserve_ms = None if args.reserve_hours is None else int(args.reserve_hours * HOUR_MS)
        stats = job.run(args.broker, args.master, args.topic, args.small_bytes, args.target_bytes, args.grace_seconds,
                        not args.no_wait, s3_access(args), reserve_ms, args.expiry_margin_seconds,
                        acl_credentials(args))
    except TierJobError as exc:
        return fail("compact", str(exc))
    except Exception as exc:  # Spark or the backend: still one line, not a traceback
        return fail("compact", error_of(exc))
    summary("compact", stats)
    return 0 if not stats["groups_failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
