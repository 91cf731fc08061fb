"""What every benchmark scenario shares: run sizes, metric declarations with their targets, recording values,
load generation, and turning values into rows with ratios to the echo ceiling and met / not met."""

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict, TypeVar

BODY = b"x" * 1024  # 1 KiB payloads everywhere
BATCH = 64

MET, NOT_MET, NO_TARGET, NOT_RUN, FAILED = "met", "not met", "-", "not run", "failed"
SCALED = "n/a (scaled down)"  # measured below the size its target is set for: shown, not judged


# -- run sizes -------------------------------------------------------------------------------------
class _Sizes(TypedDict):
    seconds: float
    warmup: float
    latency_seconds: float
    store_messages: int
    store_repeat: int


@dataclass(frozen=True)
class Config:
    mode: str  # "smoke" (tiny, for the test), "quick" (make bench) or "full" (make bench-full)
    seconds: float  # each throughput measurement, after its warm-up
    warmup: float  # seconds of load before a throughput measurement starts counting
    window: int  # calls in flight from one client thread, the same for the echo and every scenario
    latency_rate: int  # msgs/s of the send-to-receive latency scenario (and of the echo latency probe)
    latency_seconds: float
    store_messages: int  # per in-process store measurement
    store_repeat: int  # store figures are medians of this many runs
    workdir: Path = Path("/tmp")

    @property
    def smoke(self) -> bool:
        return self.mode == "smoke"

    @property
    def full(self) -> bool:
        return self.mode == "full"

    @classmethod
    def for_mode(cls, mode: str, workdir: Path, seconds: float | None = None, window: int = 8) -> "Config":
        sizes = {
            "smoke": _Sizes(seconds=0.3, warmup=0.05, latency_seconds=0.3, store_messages=64 * 100, store_repeat=1),
            "quick": _Sizes(seconds=4.0, warmup=0.5, latency_seconds=3.0, store_messages=64 * 2000, store_repeat=3),
            "full": _Sizes(seconds=5.0, warmup=1.0, latency_seconds=10.0, store_messages=64 * 4000, store_repeat=3),
        }[mode]
        if seconds is not None:
            sizes["seconds"] = sizes["latency_seconds"] = seconds
        return cls(mode=mode, window=window, latency_rate=1000, workdir=workdir, **sizes)


# -- what a scenario measures ----------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """``op value``, on the metric's own value or, with ``of`` (a metric id), on its ratio to that metric."""

    op: str  # ">=", ">", "<=", "<"
    value: float
    of: str | None = None
    text: str = ""  # how to print it when the default is not clear enough

    def met(self, value: float) -> bool:
        return {">=": value >= self.value, ">": value > self.value, "<=": value <= self.value,
                "<": value < self.value}[self.op]


@dataclass(frozen=True)
class Metric:
    """One row of the report.

    ``echo`` names the echo figure the value is divided by: "batch" (msgs/s of a 64 x 1 KiB echo; MB/s
    rows are compared with the same bytes), "unary" (calls/s of a 1 KiB echo), "p50"/"p99" (echo round-trip
    latency at the latency probe's rate; "s" and "ms" rows), "rss" (the echo server's resident memory), or
    None where the echo has no counterpart (counts). ``vs`` is another metric id to show a second ratio
    against (the ceiling, the normal topic, the local read), ``short`` is how others name this one there.
    """

    id: str
    label: str
    unit: str
    echo: str | None = None
    vs: str | None = None
    target: Target | None = None
    issue: int | None = None
    short: str = ""
    target_note: str = ""  # a target shown but not judged here ("bounded", "flat")


@dataclass
class Recorder:
    """Where a scenario puts what it measured, as it goes (a failure half-way keeps the earlier values)."""

    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    added: list[Metric] = field(default_factory=list)  # metrics a scenario declares as it runs
    status: dict[str, str] = field(default_factory=dict)  # met / not met judged by the scenario itself

    def record(self, metric_id: str, value: float, note: str = "") -> None:
        self.values[metric_id] = float(value)
        if note:
            self.notes[metric_id] = note

    def skip(self, metric_id: str, reason: str) -> None:
        """This metric is not measured by this run (a row "not run: reason", not a failure)."""
        self.status[metric_id] = NOT_RUN
        self.notes[metric_id] = reason

    def add(self, metric: Metric, value: float | None, note: str = "") -> None:
        self.added.append(metric)
        if value is not None:
            self.record(metric.id, value, note)
        elif note:
            self.notes[metric.id] = note


# -- load generation -------------------------------------------------------------------------------
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Pending(Protocol[R_co]):
    """A call in flight: a ``concurrent.futures.Future`` or a gRPC call future."""

    def result(self) -> R_co: ...


def windowed_rate(submit: Callable[[], Pending[R]], count: Callable[[R], int], window: int, seconds: float,
                  warmup: float = 0.0) -> float:
    """Keep ``window`` calls in flight from one thread. The first ``warmup`` seconds are not counted; then
    items completed per second over ``seconds`` (calls in flight at the end are waited for and counted)."""
    warm_until = time.perf_counter() + warmup
    in_flight: deque[Pending[R]] = deque(submit() for _ in range(window))
    start = stop = None
    done = 0
    while in_flight:
        n = count(in_flight.popleft().result())
        now = time.perf_counter()
        if start is None:
            if now >= warm_until:
                start, stop = now, now + seconds
        else:
            done += n
        if stop is None or now < stop:
            in_flight.append(submit())
    assert start is not None
    return done / (time.perf_counter() - start)


def paced(rate_per_s: int, seconds: float, call: Callable[[int], object]) -> None:
    """Call ``call(i)`` ``rate * seconds`` times at a fixed rate (no catching up in bursts beyond one)."""
    t0 = time.perf_counter()
    for i in range(max(1, int(rate_per_s * seconds))):
        delay = t0 + i / rate_per_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        call(i)


def percentile(samples: Iterable[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


# -- rows --------------------------------------------------------------------------------------------
@dataclass
class Row:
    group: str
    metric: Metric
    value: float | None
    status: str
    note: str = ""
    echo_value: float | None = None  # the echo figure, in this row's unit family
    echo_ratio: float | None = None
    vs_ratio: float | None = None
    target_text: str = ""

    def as_json(self) -> dict:
        m = self.metric
        return {"group": self.group, "id": m.id, "label": m.label, "unit": m.unit, "issue": m.issue,
                "value": self.value, "status": self.status, "note": self.note, "echo_ref": m.echo,
                "echo_value": self.echo_value, "x_echo": self.echo_ratio, "vs": m.vs, "vs_ratio": self.vs_ratio,
                "target": self.target_text}


def _echo_in_unit(echo: dict[str, float], ref: str | None, unit: str) -> float | None:
    """The echo figure named ``ref`` expressed in ``unit`` (so that value / it is a plain ratio)."""
    if ref is None or ref not in echo:
        return None
    base = echo[ref]
    if ref == "batch" and unit == "MB/s":
        return base * len(BODY) / 1e6
    if ref in ("p50", "p99"):  # echo latencies are in ms
        return {"ms": base, "s": base / 1000, "us": base * 1000}.get(unit)
    if ref == "rss":  # MiB
        return {"MiB": base, "GiB": base / 1024, "bytes": base * 1024 * 1024}.get(unit)
    return base


def target_text(metric: Metric, metric_short: Callable[[str], str]) -> str:
    target, unit = metric.target, metric.unit
    if target is None:
        return metric.target_note
    if target.text:
        return target.text
    number = f"{int(target.value):,}" if float(target.value).is_integer() else f"{target.value:g}"
    if target.of:
        return f"{target.op} {number}x {metric_short(target.of)}"
    return f"{target.op} {number} {unit}" if unit in ("ms", "s", "MiB") else f"{target.op} {number}"


def build_rows(groups: list[tuple[str, list[Metric], Recorder, str]], echo: dict[str, float]) -> list[Row]:
    """``groups``: (group name, its metrics, what it recorded, the reason when nothing ran or "" when it
    ran). A metric without a value is "not run" with the group's reason, or "failed" when the group ran."""
    metrics = {m.id: m for _, ms, _, _ in groups for m in ms}
    values = {k: v for _, _, rec, _ in groups for k, v in rec.values.items()}

    def short(metric_id: str) -> str:
        m = metrics.get(metric_id)
        return (m.short or m.label) if m else metric_id

    rows = []
    for group, ms, rec, reason in groups:
        for m in ms:
            value = values.get(m.id)
            note = rec.notes.get(m.id, "")
            row = Row(group, m, value, NO_TARGET, note, target_text=target_text(m, short))
            ref = _echo_in_unit(echo, m.echo, m.unit)
            row.echo_value = ref
            if value is None:
                row.status = NOT_RUN if reason or rec.status.get(m.id) == NOT_RUN else FAILED
                row.note = note or reason or "no value recorded"
                rows.append(row)
                continue
            if ref:
                row.echo_ratio = value / ref
            if m.vs and values.get(m.vs):
                row.vs_ratio = value / values[m.vs]
            if m.target is not None:
                compared = value
                if m.target.of:
                    base = values.get(m.target.of) if not m.target.of.startswith("echo.") else \
                        _echo_in_unit(echo, m.target.of.removeprefix("echo."), m.unit)
                    compared = value / base if base else math.nan
                row.status = MET if compared == compared and m.target.met(compared) else NOT_MET
            row.status = rec.status.get(m.id, row.status)
            rows.append(row)
    return rows


# -- printing ----------------------------------------------------------------------------------------
def format_value(value: float, unit: str) -> str:
    if 0 < abs(value) < 0.1:
        return f"{value:.2g}"
    if unit in ("ms", "s", "x", "MB/s") or abs(value) < 100:
        return f"{value:,.2f}"
    return f"{value:,.0f}"


def compact(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "s" and value < 0.1:
        return f"{value * 1000:.2f} ms"
    if unit in ("ms", "s"):
        return f"{value:.2f} {unit}"
    if unit in ("MiB", "MB/s"):
        return f"{value:,.0f} {unit}"
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


COLUMNS = (("scenario", 44, "<"), ("value", 11, ">"), ("unit", 7, "<"), ("x echo", 7, ">"), ("echo", 9, ">"),
           ("vs", 15, "<"), ("target", 19, "<"), ("status", 0, "<"))


def _line(cells: Iterable[str]) -> str:
    return " ".join(f"{c:{a}{w}}" if w else c for c, (_, w, a) in zip(cells, COLUMNS, strict=True)).rstrip()


def format_table(rows: list[Row], group_titles: dict[str, str]) -> str:
    out = [_line(name for name, _, _ in COLUMNS)]
    group = None
    for r in rows:
        if r.group != group:
            group = r.group
            out.append(f"-- {group_titles.get(group, group)}")
        m = r.metric
        if r.value is None:
            out.append(_line([m.label, "", m.unit, "", "", "", r.target_text, f"{r.status}: {r.note}"]))
            continue
        vs = f"{r.vs_ratio:.2f} x {_short(rows, m.vs)}" if r.vs_ratio is not None else ""
        x_echo = f"{r.echo_ratio:.2f}" if r.echo_ratio is not None else "n/a"
        out.append(_line([m.label, format_value(r.value, m.unit), m.unit, x_echo, compact(r.echo_value, m.unit),
                          vs, r.target_text, r.status + (f" ({r.note})" if r.note else "")]))
    return "\n".join(out)


def _short(rows: list[Row], metric_id: str | None) -> str:
    for r in rows:
        if r.metric.id == metric_id:
            return r.metric.short or r.metric.label
    return metric_id or ""
