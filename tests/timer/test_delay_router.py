"""Delay levels (``messageDelayLevel``), the router's due times and refusals, and the timer-topic properties."""

import pytest

from broker.broker_config import ConfigError, load_broker_config
from broker.timer.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from broker.timer.delay_router import DelayRouter, delivered_properties, is_delayed_needle_in, timer_target
from common.message_properties import decode_properties, encode_properties
from common.request_error import RequestError

NOW = 1_700_000_000_000
MAX_DELAY_MS = 259_200_000
ROUTER = DelayRouter(parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL), MAX_DELAY_MS)


def props(**values: object) -> bytes:
    return encode_properties({"UNIQ_KEY": "ABC", **{k: str(v) for k, v in values.items()}})


# -- messageDelayLevel ----------------------------------------------------------------------------------
def test_default_levels_are_upstreams_eighteen():
    levels = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000)
    assert levels[4] == 60_000 and levels[13] == 600_000 and levels[-2:] == (3_600_000, 7_200_000)


def test_units_and_spacing():
    assert parse_delay_levels(" 0s  2m\t3h 1d ") == (0, 120_000, 10_800_000, 86_400_000)


@pytest.mark.parametrize("raw", ["", "   ", "1s 5", "1x", "s", "-1s", "1.5s", "1S", "1s,5s", "1000000000s"])
def test_bad_levels_are_refused(raw: str):
    with pytest.raises(ValueError):
        parse_delay_levels(raw)


def test_broker_conf_names_the_key_of_a_bad_value():
    with pytest.raises(ConfigError, match=r"^messageDelayLevel: level 2 '5y'"):
        load_broker_config("messageDelayLevel=1s 5y\n")
    with pytest.raises(ConfigError, match=r"^timerMaxDelaySec:"):
        load_broker_config("timerMaxDelaySec=0\n")
    config = load_broker_config("messageDelayLevel=1s 2s\ntimerMaxDelaySec=60\n")
    assert (config.message_delay_level, config.timer_max_delay_sec, config.unknown_keys) == ("1s 2s", 60, [])
    defaults = load_broker_config("")
    assert defaults.message_delay_level == DEFAULT_MESSAGE_DELAY_LEVEL and defaults.timer_max_delay_sec == 259_200


# -- due times ------------------------------------------------------------------------------------------
def test_not_delayed():
    assert ROUTER.due_ms(b"", NOW) is None
    assert ROUTER.due_ms(props(), NOW) is None
    assert ROUTER.due_ms(props(DELAY=0), NOW) is None  # level 0: not delayed, as upstream
    assert ROUTER.due_ms(props(XDELAY=3, MY_TIMER_DELIVER_MS=5), NOW) is None  # other names ending alike


@pytest.mark.parametrize(("level", "delay_ms"), [(1, 1000), (2, 5000), (3, 10_000), (18, 7_200_000)])
def test_levels_count_from_the_brokers_clock(level: int, delay_ms: int):
    assert ROUTER.due_ms(props(DELAY=level), NOW) == NOW + delay_ms


@pytest.mark.parametrize("level", [19, 100, -1])
def test_levels_out_of_range_are_refused(level: int):
    with pytest.raises(RequestError, match=rf"delay level {level} is out of range: this broker has levels 1\.\.18"):
        ROUTER.due_ms(props(DELAY=level), NOW)


def test_absolute_times():
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=NOW + 1234), NOW) == NOW + 1234
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=NOW + MAX_DELAY_MS), NOW) == NOW + MAX_DELAY_MS  # the limit: taken
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=NOW), NOW) == NOW  # now and the past: at once
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=NOW - 10_000), NOW) == NOW
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=0), NOW) == NOW
    assert ROUTER.due_ms(props(TIMER_DELIVER_MS=-5), NOW) == NOW


def test_times_beyond_the_max_are_refused():
    with pytest.raises(RequestError, match="beyond timerMaxDelaySec=259200: at most 259200 s in the future"):
        ROUTER.due_ms(props(TIMER_DELIVER_MS=NOW + MAX_DELAY_MS + 1), NOW)


@pytest.mark.parametrize(("values", "error"), [
    ({"DELAY": 2, "TIMER_DELIVER_MS": NOW + 1}, "not both"),
    ({"DELAY": "x"}, "property DELAY 'x' is not an integer"),
    ({"DELAY": ""}, "property DELAY '' is not an integer"),
    ({"TIMER_DELIVER_MS": "1e9"}, "property TIMER_DELIVER_MS '1e9' is not an integer"),
    # a time in nanoseconds was said to be "not an integer" (the SDK review)
    ({"TIMER_DELIVER_MS": "1796691632972362513"}, "'1796691632972362513' is out of range: more than 18 digits"),
    ({"TIMER_DELIVER_MS": "9" * 30}, "is out of range"),
    ({"DELAY": "\u00b2"}, "is not an integer"),  # a Unicode digit is no digit here
])
def test_bad_values_are_refused(values: dict, error: str):
    with pytest.raises(RequestError, match=error):
        ROUTER.due_ms(props(**values), NOW)


def test_delay_of_level_clamps_as_upstream_retries_do():
    assert ROUTER.delay_of_level(3) == 10_000
    assert ROUTER.delay_of_level(0) == ROUTER.delay_of_level(-4) == 1000
    assert ROUTER.delay_of_level(18) == ROUTER.delay_of_level(99) == 7_200_000
    assert ROUTER.max_level == 18


def test_the_needle_test_has_no_false_negatives():
    assert is_delayed_needle_in(props(DELAY=1)) and is_delayed_needle_in(props(TIMER_DELIVER_MS=1))
    assert is_delayed_needle_in(encode_properties({"DELAY": "1"}))  # first pair: no separator before it
    assert not is_delayed_needle_in(props(TAGS="DELAY", KEYS="TIMER_DELIVER_MS"))


# -- timer-topic properties -----------------------------------------------------------------------------
def test_timer_properties_carry_the_route_and_come_off_at_delivery():
    original = props(DELAY=3, TAGS="t", KEYS="k1 k2", user="v")
    timer = ROUTER.timer_properties(original, "Orders", 5, NOW + 10_000)
    assert decode_properties(timer) == {**decode_properties(original), "REAL_TOPIC": "Orders", "REAL_QID": "5",
                                        "TIMER_OUT_MS": str(NOW + 10_000)}
    target = timer_target(timer)
    assert target is not None and (target.topic, target.queue_id, target.due_ms) == ("Orders", 5, NOW + 10_000)
    assert decode_properties(delivered_properties(timer)) == {"UNIQ_KEY": "ABC", "TAGS": "t", "KEYS": "k1 k2",
                                                              "user": "v"}


def test_routing_properties_a_client_set_are_replaced():
    forged = props(TIMER_DELIVER_MS=NOW, REAL_TOPIC="Elsewhere", REAL_QID=99, TIMER_OUT_MS=1)
    timer = ROUTER.timer_properties(forged, "Orders", 1, NOW + 5)
    decoded = decode_properties(timer)
    assert (decoded["REAL_TOPIC"], decoded["REAL_QID"], decoded["TIMER_OUT_MS"]) == ("Orders", "1", str(NOW + 5))
    assert timer.count(b"REAL_TOPIC\x01") == 1


def test_properties_without_a_trailing_separator_stay_well_formed():
    timer = ROUTER.timer_properties(b"DELAY\x011", "T", 0, NOW)
    assert decode_properties(timer) == {"DELAY": "1", "REAL_TOPIC": "T", "REAL_QID": "0", "TIMER_OUT_MS": str(NOW)}
    assert ROUTER.timer_properties(b"", "T", 0, NOW).startswith(b"REAL_TOPIC\x01T\x02")


@pytest.mark.parametrize("raw", [b"", b"REAL_TOPIC\x01T\x02",
                                 b"REAL_TOPIC\x01T\x02REAL_QID\x01x\x02TIMER_OUT_MS\x011\x02",
                                 b"REAL_TOPIC\x01\x02REAL_QID\x011\x02TIMER_OUT_MS\x011\x02"])
def test_a_record_without_its_route_has_no_target(raw: bytes):
    assert timer_target(raw) is None
