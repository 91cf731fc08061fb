"""What a job prints: one summary line on stdout (``key=value``), or one error line on stderr."""

import sys


def summary(job: str, stats: dict[str, float]) -> None:
    parts = [f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()]
    print(f"{job}: " + " ".join(parts), flush=True)


def fail(job: str, message: str) -> int:
    print(f"{job}: failed: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return 1
