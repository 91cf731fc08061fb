"""What a job prints: one summary line on stdout (``key=value``), or one error line on stderr."""

import sys
from collections.abc import Mapping

# Set by the session on a cluster: where the job ran, appended to its summary line (master=..., app_id=...)
cluster_fields: dict[str, str] = {}


def summary(job: str, stats: Mapping[str, float | int | str]) -> None:
    parts = [f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in {**stats, **cluster_fields}.items()]
    print(f"{job}: " + " ".join(parts), flush=True)


def fail(job: str, message: str) -> int:
    print(f"{job}: failed: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return 1
