"""Query by key, by unique key and by message id."""

import time

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


def test_index_survives_restart_and_rolls_files(open_store: StoreFactory):
    store = open_store(max_index_num=64)
    r = None
    for i in range(200):
        r = store.put_messages("RollK", 0, [b"v"], [encode_properties({"KEYS": f"k{i}"})])
    store.wait_dispatched(r.append.end_offset)
    store.shutdown()
    store = open_store(max_index_num=64)
    assert len(store.index_service._files) >= 3
    for i in (0, 63, 64, 199):
        assert len(store.query_message("RollK", f"k{i}")) == 1, i


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
