"""The compaction's verification of a merged object, and the driver's calls on many objects (no Spark needed)."""

import threading
import time

import pytest

from common.message_codec import encode_record
from spark_jobs.tier_objects import OBJECT_CALLS_IN_FLIGHT, CorruptObjectError, on_each_object, verify


def _records(base: int, n: int) -> bytes:
    out, pos = [], base
    for i in range(n):
        r = encode_record(b"T", 0, b"body-%d" % i, b"KEYS\x01k\x02", queue_offset=i, physical_offset=pos)
        out.append(r)
        pos += len(r)
    return b"".join(out)


def test_verify_counts_records_of_an_intact_object():
    data = _records(4096, 50)
    assert verify(data, 0, 4096, len(data)) == 50


@pytest.mark.parametrize("where", [0, 4, 30, 95, -1])
def test_verify_refuses_a_flipped_byte(where: int):
    data = bytearray(_records(0, 5))
    data[where] ^= 0x40
    with pytest.raises(CorruptObjectError):
        verify(bytes(data), 0, 0, len(data))


def test_verify_refuses_a_wrong_position_a_short_object_and_torn_units():
    data = _records(0, 3)
    with pytest.raises(CorruptObjectError):
        verify(data, 0, 100, len(data))  # records placed elsewhere than they say
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data))
    with pytest.raises(CorruptObjectError):
        verify(data[:-1], 0, 0, len(data) - 1)
    with pytest.raises(CorruptObjectError):
        verify(b"x" * 30, 1, 0, 30)
    assert verify(b"x" * 56, 1, 0, 56) == 2


def test_on_each_object_overlaps_calls_and_keeps_the_paths_order():
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def call(tier: str, path: str) -> str:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.02)  # a round trip to an object store
        with lock:
            running[0] -= 1
        return f"{tier}:{path}"

    paths = [f"p{i}" for i in range(40)]
    assert on_each_object(call, "root", paths) == [f"root:{p}" for p in paths]
    assert 1 < running[1] <= OBJECT_CALLS_IN_FLIGHT


def test_on_each_object_raises_only_once_every_call_ended():
    ended: list[str] = []

    def call(_: str, path: str) -> None:
        if path == "p0":
            raise OSError("the store refused p0")
        time.sleep(0.05)
        ended.append(path)

    with pytest.raises(OSError, match="refused p0"):
        on_each_object(call, "root", [f"p{i}" for i in range(5)])
    assert sorted(ended) == ["p1", "p2", "p3", "p4"]  # none left running behind the failure
