"""The renderer on its own: alignment, JSON documents, one-line previews, times."""

import json
from datetime import datetime

import pytest

from admin_cli.output import (
    Column,
    Table,
    body_preview,
    emit_record,
    emit_tables,
    format_duration,
    format_timestamp,
    render_table,
)

TABLE = Table([Column("name", "Name"), Column("count", "Count")],
              [{"name": "a", "count": 5}, {"name": "longer", "count": 123}], name="items", title="Items",
              footer=["Total: 128"])


def test_table_aligns_columns_and_right_justifies_numbers():
    assert render_table(TABLE).splitlines() == [
        "Name    Count",
        "a           5",
        "longer    123",
        "Total: 128",
    ]


def test_missing_values_render_as_dash():
    table = Table([Column("x", "X"), Column("y", "Y")], [{"x": None, "y": []}, {"x": True}])
    assert render_table(table).splitlines()[1:] == ["-     -", "true  -"]


def test_json_one_table_is_a_list_several_an_object(capsys: pytest.CaptureFixture[str]):
    emit_tables(True, TABLE)
    assert json.loads(capsys.readouterr().out) == TABLE.rows
    other = Table([Column("k", "K")], [{"k": 1}], name="others", title="Others")
    emit_tables(True, TABLE, other)
    assert json.loads(capsys.readouterr().out) == {"items": TABLE.rows, "others": [{"k": 1}]}
    emit_tables(False, TABLE, other)
    out = capsys.readouterr().out
    assert out.startswith("Items:\nName") and "\n\nOthers:\nK\n1\n" in out and "Total" in out


def test_record_is_key_value_lines_or_an_object(capsys: pytest.CaptureFixture[str]):
    columns = [Column("topic", "Topic"), Column("queue_id", "Queue ID")]
    emit_record(False, columns, {"topic": "T", "queue_id": 3})
    assert capsys.readouterr().out == "Topic   : T\nQueue ID: 3\n"
    emit_record(True, columns, {"topic": "T", "queue_id": 3})
    assert json.loads(capsys.readouterr().out) == {"topic": "T", "queue_id": 3}


def test_body_preview_is_one_line_and_bounded():
    assert body_preview(b"hi\nthere\t!") == "hi\\nthere\\t!"
    assert body_preview("héllo".encode()) == "héllo"
    assert body_preview(b"x" * 100, limit=10) == "xxxxxxx..."
    assert body_preview(b"\xff\xfe\x00", limit=64) == "hex:fffe00"


def test_times():
    assert format_timestamp(0) == "-" and format_timestamp(None) == "-"
    ms = 1_700_000_000_123
    assert format_timestamp(ms) == datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") + ".123"
    assert format_duration(3_723_000) == "1h 2m 3s" and format_duration(90_061_000) == "1d 1h 1m 1s"
    assert format_duration(None) == "-"


def test_what_a_producer_wrote_cannot_reach_the_terminal_raw(capsys: pytest.CaptureFixture[str]):
    """Tags, keys and properties were printed raw (bodies were escaped): an ESC or a CR in them went straight to
    the operator's terminal, and a newline split a record into lines that looked like others."""
    row = {"tags": "t\x1b[2J", "keys": "k\rz ü", "properties": {"1": "v\nTopic: forged"}}
    columns = [Column("tags", "Tags"), Column("keys", "Keys"),
               Column("properties", "Properties", lambda p: ", ".join(f"{k}={v}" for k, v in p.items()))]
    emit_record(False, columns, row)
    emit_tables(False, Table(columns, [row]))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "Topic: forged" not in out.splitlines()
    assert "t\\x1b[2J" in out and "k\\rz ü" in out and "1=v\\nTopic: forged" in out
    assert len(out.splitlines()) == 3 + 2  # three record lines, a header and one row
