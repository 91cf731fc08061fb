"""resetOffsetByTime's -s on its own: epoch ms, 'now', upstream's yyyy-MM-dd#HH:mm:ss:SSS, and refusals."""

from datetime import datetime

import click
import pytest

from admin_cli.timestamps import TIMESTAMP, parse_timestamp


def test_epoch_milliseconds_pass_through():
    assert parse_timestamp("0") == 0
    assert parse_timestamp(" 1700000000123 ") == 1_700_000_000_123


def test_now_reads_the_clock():
    assert parse_timestamp("now", clock=lambda: 42) == 42
    assert parse_timestamp("NOW", clock=lambda: 7) == 7


def test_upstream_pattern_is_local_time_with_milliseconds():
    expected = int(datetime(2024, 3, 5, 7, 8, 9).timestamp()) * 1000 + 45
    assert parse_timestamp("2024-03-05#07:08:09:045") == expected


@pytest.mark.parametrize("raw", ["", "yesterday", "-5", "1.5", "2024-03-05 07:08:09", "2024-03-05#07:08:09",
                                 "2024-03-05#07:08:09:45", "2024-02-30#00:00:00:000", "2024-13-01#00:00:00:000",
                                 "99999999999999999999"])
def test_anything_else_is_refused_saying_what_is_accepted(raw: str):
    with pytest.raises(ValueError, match=r"epoch milliseconds|not a date|too large"):
        parse_timestamp(raw)


def test_the_click_type_names_the_flag():
    @click.command()
    @click.option("-s", "--timestamp", type=TIMESTAMP)
    def cmd(timestamp: int) -> None:
        click.echo(str(timestamp))

    ctx = cmd.make_context("cmd", ["-s", "1000"])
    assert ctx.params["timestamp"] == 1000
    with pytest.raises(click.BadParameter) as info:
        cmd.make_context("cmd", ["-s", "soon"])
    assert "-s" in info.value.format_message() and "soon" in info.value.format_message()
