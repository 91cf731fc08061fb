"""Query by key, by unique key and by message id."""

import logging
import os
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.dispatch.dispatch_request import PHYSICAL_OFFSET, SIZE, DispatchRequest
from broker.store.index.index_file import IndexFile
from broker.store.index.index_service import IndexService
from broker.store.message_store import MessageStore
from common.message_properties import encode_properties
from tests.store.conftest import StoreFactory


def test_query_by_key_unique_key_and_time_range(open_store: StoreFactory):
    store = open_store()
    r = None
    for i in range(300):
        props = encode_properties({"KEYS": f"order-{i % 50} shared", "UNIQ_KEY": f"U{i:08d}"})
        r = store.put_messages("KeyT", i % 4, [f"b{i}".encode()], [props])
    store.put_messages("OtherT", 0, [b"x"], [encode_properties({"KEYS": "order-7"})])
    store.wait_dispatched(r.append.end_offset + 10_000, timeout_s=0.5)

    hits = store.query_message("KeyT", "order-7", max_num=100)
    assert sorted(m.body for m in hits) == sorted(f"b{i}".encode() for i in range(7, 300, 50))
    assert all(m.topic == "KeyT" for m in hits)
    assert len(store.query_message("KeyT", "shared", max_num=64)) == 64
    unique = store.query_message("KeyT", "U00000123")
    assert [m.body for m in unique] == [b"b123"]
    assert store.query_message("KeyT", "missing") == []
    future = int(time.time() * 1000) + 3_600_000
    assert store.query_message("KeyT", "order-7", begin_ms=future, end_ms=future + 1000) == []


def test_query_by_key_answers_within_its_byte_budget_and_always_one(open_store: StoreFactory):
    store = open_store()
    r = None
    for i in range(6):
        r = store.put_messages("BigKeyT", 0, [bytes([i]) * 3000], [encode_properties({"KEYS": "batch-1"})])
    store.wait_dispatched(r.append.end_offset)
    record = len(store.query_message_records("BigKeyT", "batch-1", max_num=1)[0])
    with patch("broker.store.message_store.QUERY_MAX_BYTES", 2 * record + 10):
        assert len(store.query_message_records("BigKeyT", "batch-1", max_num=64)) == 2
    with patch("broker.store.message_store.QUERY_MAX_BYTES", 1):
        assert len(store.query_message_records("BigKeyT", "batch-1", max_num=64)) == 1
    assert len(store.query_message_records("BigKeyT", "batch-1", max_num=64)) == 6


def keyed_and_shut(open_store: StoreFactory, topic: str) -> MessageStore:
    """A store whose small index files (64 entries) roll over 200 keyed messages, ``k0``..``k199``; shut."""
    store = open_store(max_index_num=64)
    r = None
    for i in range(200):
        r = store.put_messages(topic, 0, [b"v"], [encode_properties({"KEYS": f"k{i}"})])
    store.wait_dispatched(r.append.end_offset)
    store.shutdown()
    return store


def test_index_survives_restart_and_rolls_files(open_store: StoreFactory):
    keyed_and_shut(open_store, "RollK")
    store = open_store(max_index_num=64)
    assert len(store.index_service._files) >= 3
    for i in (0, 63, 64, 199):
        assert len(store.query_message("RollK", f"k{i}")) == 1, i


@pytest.mark.parametrize("damage", ["cut", "zeroed header"])
def test_a_damaged_index_file_is_set_aside_and_its_keys_indexed_again(open_store: StoreFactory, damage: str,
                                                                      caplog: pytest.LogCaptureFixture):
    """(A cut file loaded as it was: the next dispatch fail-stopped the store, and so at every start; a zeroed
    header of a full file answered "not found" for its keys.)"""
    store = keyed_and_shut(open_store, "DamagedK")
    second = sorted(store.index_service.root.iterdir())[1]  # a full file, with others after it
    if damage == "cut":
        os.truncate(second, second.stat().st_size // 2)
    else:
        with second.open("r+b") as f:
            f.write(bytes(40))
    with caplog.at_level(logging.WARNING):
        store = open_store(max_index_num=64)
    assert "index_file_set_aside" in caplog.text and (second.parent / f"{second.name}.damaged").exists()
    r = store.put_messages("DamagedK", 0, [b"v"], [encode_properties({"KEYS": "after"})])
    store.wait_dispatched(r.append.end_offset)
    for key in ("k0", "k63", "k64", "k100", "k199", "after"):
        assert len(store.query_message("DamagedK", key)) == 1, key
    assert not store.running_flags.fail_stop_reason


def test_index_files_made_after_the_clock_stepped_back_load_in_order(open_store: StoreFactory):
    """Files are named by the time they were made and loaded in name order: one made after a backward step sorted
    before the older one, and after a restart the index took the older file for the last (records indexed twice,
    lookups no longer newest first)."""
    store = open_store(max_index_num=64)
    clock = iter(range(10**18, 0, -10**15))  # each file made an earlier "now" than the one before
    with patch("broker.store.index.index_service.time", SimpleNamespace(time_ns=lambda: next(clock))):
        r = None
        for i in range(200):
            r = store.put_messages("StepK", 0, [b"v"], [encode_properties({"KEYS": f"k{i}"})])
        store.wait_dispatched(r.append.end_offset)
    names = [f.path.name for f in store.index_service._files]
    assert len(names) >= 3 and names == sorted(names)
    store.shutdown()
    store = open_store(max_index_num=64)
    for i in (0, 63, 64, 199):
        assert len(store.query_message("StepK", f"k{i}")) == 1, i


def test_properties_whose_names_end_like_keys_do_not_break_dispatch(open_store: StoreFactory):
    """``MYKEYS``/``BIZ_UNIQ_KEY`` contain the needles ``KEYS\\x01``/``UNIQ_KEY\\x01`` but are other properties: the
    index must skip them (it used to fail on them, which fail-stopped the store at every restart)."""
    store = open_store()
    props = encode_properties({"MYKEYS": "a b", "BIZ_UNIQ_KEY": "U1"})
    r = store.put_messages("LookAlikeT", 0, [b"x"], [props])
    assert store.wait_dispatched(r.append.end_offset, timeout_s=5)
    assert store.running_flags.writeable
    assert store.query_message("LookAlikeT", "a") == [] and store.query_message("LookAlikeT", "U1") == []
    assert store.put_messages("LookAlikeT", 0, [b"y"], [b""]).ok


def test_properties_that_start_with_the_unique_key_are_indexed_by_it_and_by_any_keys_after_it(
        open_store: StoreFactory):
    """The SDK writes the unique key first: with no KEYS after it, it is taken without a search; with KEYS
    after it, the properties are searched in full, so those keys are indexed too."""
    store = open_store()
    alone = encode_properties({"UNIQ_KEY": "U-alone"})
    tagged = encode_properties({"UNIQ_KEY": "U-tagged", "TAGS": "TagA", "MYKEYS": "not-a-key"})
    keyed = encode_properties({"UNIQ_KEY": "U-keyed", "KEYS": "after-1 after-2"})
    assert all(p.startswith(b"UNIQ_KEY") for p in (alone, tagged, keyed))
    store.put_messages("UniqueT", 0, [b"a"], [alone])
    store.put_messages("UniqueT", 0, [b"t"], [tagged])
    r = store.put_messages("UniqueT", 0, [b"k"], [keyed])
    assert store.wait_dispatched(r.append.end_offset, timeout_s=5)
    for key, body in (("U-alone", b"a"), ("U-tagged", b"t"), ("U-keyed", b"k"), ("after-1", b"k"), ("after-2", b"k")):
        assert [m.body for m in store.query_message("UniqueT", key)] == [body], key
    assert store.query_message("UniqueT", "not-a-key") == []


def test_a_message_with_thousands_of_keys_indexes_its_first_64_distinct_ones(open_store: StoreFactory):
    """Each key was indexed, repeats too: a batch of such messages (within the properties' limit) held dispatch
    for every topic for seconds and wrote ten times its size in index entries."""
    store = open_store()
    keys = " ".join(["dup"] * 100 + [f"k{i}" for i in range(5000)])
    r = store.put_messages("ManyKeysT", 0, [b"m"], [encode_properties({"KEYS": keys, "UNIQ_KEY": "U-many"})])
    assert store.wait_dispatched(r.append.end_offset, timeout_s=5)
    assert store.index_service._files[-1].index_count - 1 == 64 + 1  # 64 keys and the unique key
    for key in ("dup", "k0", "k62", "U-many"):
        assert [m.body for m in store.query_message("ManyKeysT", key)] == [b"m"], key
    assert store.query_message("ManyKeysT", "k63") == []


# -- the run of unique keys written in passes, against the record-by-record way -----------------------------------


def dispatched_index(root: Path, runs: list[list[DispatchRequest]], slot_num: int, index_num: int,
                     one_by_one: bool) -> list[bytes]:
    """The bytes of every index file after dispatching ``runs``, record by record when ``one_by_one``."""
    service = IndexService(root, slot_num, index_num)
    service.load()
    with ExitStack() as patches:
        if one_by_one:  # what the passes stand in for: keys found one by one, entries written one by one
            patches.enter_context(patch.object(service, "_unique_key_entries", lambda requests, done: None))
            patches.enter_context(patch.object(IndexFile, "_put_chunk", IndexFile._put_each))
        for run in runs:
            service.dispatch(run, run[-1][PHYSICAL_OFFSET] + run[-1][SIZE] if run else service._indexed_end())
    files = [bytes(f.mm) for f in service._files]
    service.shutdown()
    return files


def unique_key_runs(data: st.DataObject) -> list[list[DispatchRequest]]:
    """Runs of records as reput hands them over: all in the SDK's form (only a unique key, written first), some of
    them stored a second later, or some with KEYS, tags, no properties or another topic; store times that step
    back, and records already indexed."""
    runs: list[list[DispatchRequest]] = []
    offset = 1_000
    for _ in range(data.draw(st.integers(1, 5))):
        run: list[DispatchRequest] = []
        store_ts = data.draw(st.sampled_from([1_700_000_000_000, 1_700_000_004_500, 1_699_999_999_000]))
        kinds = st.sampled_from(data.draw(st.sampled_from([
            ["unique"], ["unique"] * 9 + ["late"], ["unique"] * 6 + ["keys", "tags", "none", "other-topic", "late"]])))
        for _ in range(data.draw(st.integers(0, 150))):
            key = data.draw(st.from_regex(r"[0-9A-F]{1,24}", fullmatch=True))
            kind = data.draw(kinds)
            props = {"keys": encode_properties({"UNIQ_KEY": key, "KEYS": "k1 k2"}),
                     "tags": encode_properties({"UNIQ_KEY": key, "TAGS": "T"}),
                     "none": b""}.get(kind, encode_properties({"UNIQ_KEY": key}))
            run.append(("OtherT" if kind == "other-topic" else "PassT", 0, 0, offset, 100,
                        0, store_ts + (1_000 if kind == "late" else 0), props))
            offset += 100
        runs.append(run)
        if data.draw(st.booleans()):  # reput hands a run again after a restart: what is below the end is skipped
            runs.append(run[: len(run) // 2])
    return runs


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([7, 97, 500_000]), st.sampled_from([40, 100_000]))
def test_unique_keys_written_in_passes_make_the_same_index_files_as_record_by_record(tmp_path_factory, data,
                                                                                        slot_num, index_num):
    """Few slots make entries of one pass share chains; few entries make files roll part-way through a run."""
    runs = unique_key_runs(data)
    passes = dispatched_index(tmp_path_factory.mktemp("passes"), runs, slot_num, index_num, one_by_one=False)
    each = dispatched_index(tmp_path_factory.mktemp("each"), runs, slot_num, index_num, one_by_one=True)
    assert len(passes) == len(each) and passes == each


def test_a_run_of_unique_keys_is_found_by_each_key(tmp_path: Path):
    service = IndexService(tmp_path, 97, 100_000)
    service.load()
    run = [("PassT", 0, i, 1_000 + 100 * i, 100, 0, 1_700_000_000_000, encode_properties({"UNIQ_KEY": f"U{i}"}))
           for i in range(200)]
    assert service._unique_key_entries(run, 0) is not None  # the passes take this run
    service.dispatch(run, 1_000 + 100 * 200)
    for i in range(200):
        assert 1_000 + 100 * i in service.lookup("PassT", f"U{i}", 64, 0, 2**62), i
    service.shutdown()
