"""Rendering results: aligned human tables by default, one JSON document on stdout with ``--json``.

Rows are dicts whose keys are stable snake_case names and whose values are JSON-ready; a ``Column`` says how
one key is titled and rendered for humans."""

import json
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import click

Row = dict[str, Any]
MISSING = "-"
_PRINTABLE = frozenset(string.printable) - frozenset("\t\n\r\x0b\x0c")


def plain(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list | tuple):
        return " ".join(plain(v) for v in value) or MISSING
    return str(value)


def format_timestamp(ms: int | None) -> str:
    """Epoch milliseconds as local ``YYYY-MM-DD HH:MM:SS.mmm``; ``-`` when unknown (0 or less)."""
    if not ms or ms <= 0:
        return MISSING
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") + f".{ms % 1000:03d}"


def format_duration(ms: int | None) -> str:
    if ms is None or ms < 0:
        return MISSING
    seconds = ms // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    parts = [f"{days}d"] * bool(days) + [f"{hours}h"] * bool(hours) + [f"{minutes}m"] * bool(minutes)
    return " ".join([*parts, f"{seconds}s"])


def one_line(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``): what a producer wrote (tags, keys, properties,
    a body) cannot move the cursor, recolour the terminal or split a record into lines that look like others."""
    if text.isprintable():
        return text
    return "".join(c if c in _PRINTABLE or (c.isprintable() and ord(c) > 127) else repr(c)[1:-1] for c in text)


def body_preview(body: bytes, limit: int = 64) -> str:
    """The start of a body on one line: text with escapes for control characters, else hex."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + body[: limit // 2].hex() + ("..." if len(body) > limit // 2 else "")
    escaped = one_line(text)
    return escaped if len(escaped) <= limit else escaped[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    header: str
    render: Callable[[Any], str] = plain


@dataclass(slots=True)
class Table:
    columns: Sequence[Column]
    rows: list[Row]
    name: str = "rows"  # the key of this table when several make one JSON document
    title: str | None = None  # printed above the human table when there are several
    footer: list[str] = field(default_factory=list)  # human-only summary lines under the table


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def render_table(table: Table) -> str:
    cells = [[c.header for c in table.columns]]
    cells += [[one_line(c.render(row.get(c.key))) for c in table.columns] for row in table.rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(table.columns))]
    numeric = [bool(table.rows) and all(_is_number(r.get(c.key)) for r in table.rows) for c in table.columns]
    lines = []
    for line in cells:
        padded = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(line, widths, numeric, strict=True)]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines + table.footer)


def render_record(columns: Sequence[Column], row: Row) -> str:
    width = max(len(c.header) for c in columns)
    return "\n".join(f"{c.header.ljust(width)}: {one_line(c.render(row.get(c.key)))}" for c in columns)


def slave_mark(from_slave: bool) -> Row:
    """The key a JSON row a slave answered carries, ``"from_slave": true``; a master's rows keep their shape."""
    return {"from_slave": True} if from_slave else {}


def slave_note(answered_by: dict[str, int]) -> list[str]:
    """Footer lines naming the broker groups a slave answered for ({broker name: its broker id}): the group had no
    live master, and a slave shows what its master had confirmed, with the offsets it last copied from it."""
    if not answered_by:
        return []
    where = ", ".join(f"{name} by its slave (BID {bid})" for name, bid in sorted(answered_by.items()))
    return ["", f"No live master, answered by a slave: {where}; a slave shows what its master confirmed and the "
                "consumer offsets it last copied from it."]


def to_json(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def emit_tables(as_json: bool, *tables: Table) -> None:
    """One table: a JSON list of row objects. Several: a JSON object mapping each table's name to its rows."""
    if as_json:
        document: Any = tables[0].rows if len(tables) == 1 else {t.name: t.rows for t in tables}
        click.echo(to_json(document))
        return
    blocks = []
    for t in tables:
        heading = f"{t.title}:\n" if t.title and len(tables) > 1 else ""
        blocks.append(heading + render_table(t))
    click.echo("\n\n".join(blocks))


def emit_record(as_json: bool, columns: Sequence[Column], row: Row) -> None:
    """One object: ``key: value`` lines for humans, a JSON object otherwise."""
    click.echo(to_json(row) if as_json else render_record(columns, row))
