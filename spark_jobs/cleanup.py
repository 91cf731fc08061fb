"""``python -m spark_jobs.cleanup --broker ADDR [--master local[2]]``: delete tier segments past their topic's
reserve time.

1. The broker marks what expired and advances the queues' min offsets (consume queue before commitlog); it
   answers every segment marked and not yet dropped (so a run after a crash finishes what the last began).
2. Executors delete those objects in parallel, a task a directory (one queue's commitlog or consume queue: on
   an object store one listing and batch deletes); a missing object is fine (deleted before a crash).
3. The broker drops their records.
Every step is idempotent: re-running after a crash at any point converges, and a run with nothing expired
changes nothing.
"""

import argparse
import logging
import sys
import time

from broker.tiered.provider.file_segment_factory import TieredBackendServiceProvider
from spark_jobs import tier_objects
from spark_jobs.broker_tier import (
    BrokerTier,
    S3Access,
    TierJobError,
    acl_credentials,
    add_acl_arguments,
    add_s3_arguments,
    s3_access,
)
from spark_jobs.job_output import error_of, fail, summary

log = logging.getLogger("spark_jobs.cleanup")


def delete(task: tuple[tier_objects.Tier, list[str]]) -> int:
    root, paths = task
    return tier_objects.delete_objects(root, paths)


def run(broker: str, master: str | None, s3: S3Access | None = None,
        credentials: tuple[str, str] | None = None) -> dict[str, float]:
    started = time.monotonic()
    with BrokerTier(broker, s3, credentials) as tier:
        snapshot = tier.snapshot()
        expired = tier.mark_expired()
        freed = 0
        if expired and snapshot.provider is not TieredBackendServiceProvider.MEMORY:
            from spark_jobs.session import spark_session

            sc = spark_session("tiered-cleanup", master).sparkContext
            root: tier_objects.Tier = snapshot.location if snapshot.location.is_s3 else str(snapshot.root)
            tasks = [(root, paths) for paths in tier_objects.group_by_directory(s.path for s in expired).values()]
            freed = sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4))).map(delete).sum()
        elif expired:
            raise TierJobError(f"broker {snapshot.broker_name} keeps its tier in {snapshot.provider}: the cleanup "
                               "job deletes posix and s3 objects only (set tieredStoreDeleteFileEnable there instead)")
        dropped = tier.drop(expired) if expired else 0
    return {"expired": len(expired), "deleted": len(expired), "dropped": dropped, "bytes": int(freed),
            "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    # Executors get functions by reference to this module; run as ``python -m`` it is ``__main__``, whose
    # functions Spark would pickle by value: call through the imported module instead.
    from spark_jobs import cleanup as job

    parser = argparse.ArgumentParser(prog="spark_jobs.cleanup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True, help="broker address HOST:PORT")
    parser.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's wins)")
    add_s3_arguments(parser)
    add_acl_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    try:
        stats = job.run(args.broker, args.master, s3_access(args), acl_credentials(args))
    except TierJobError as exc:
        return fail("cleanup", str(exc))
    except Exception as exc:  # Spark or the backend: still one line, not a traceback
        return fail("cleanup", error_of(exc))
    summary("cleanup", stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
