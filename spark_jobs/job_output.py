"""What a job prints: one summary line on stdout (``key=value``), or one error line on stderr."""

import re
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


_RAISED = re.compile(r"^[\w.]+(Error|Exception|Exit)\b[^:]*:")


def error_of(exc: BaseException) -> str:
    """An unexpected error as one line: a Spark task's (its executor's whole traceback in the text) as the exception
    the task raised, e.g. ``botocore.exceptions.NoCredentialsError: Unable to locate credentials``."""
    text = str(exc)
    if "Traceback (most recent call last)" not in text:
        return f"{type(exc).__name__}: {text}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = next((line for line in reversed(lines) if _RAISED.match(line)), lines[-1])
    return f"{raised} (in a Spark task)"
