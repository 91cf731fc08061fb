"""RocksDB mode on a store written in JSON mode: the JSON files are imported once, then renamed and left alone."""

import logging
import re
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from broker.metadata.subscription_group_manager import SubscriptionGroupConfig
from broker.store.config import StoreType
from common.topic_config import TopicConfig
from tests.metadata.helpers import open_managers

JSON_FILES = ("topics.json", "subscriptionGroup.json", "consumerOffset.json")
IMPORTED = re.compile(r"metadata_imported from=\S+ to=\S+ topics=(\d+) groups=(\d+) offsets=(\d+) "
                      r"files=(\S+) renamed_to=\*\.imported seconds=[\d.]+")


def write_json_store(root: Path) -> None:
    m = open_managers(StoreType.DEFAULT, root)
    m.topics.update_many([TopicConfig(f"T{i}", 4, 4) for i in range(300)])
    m.topics.update(TopicConfig("Attr", 1, 2, perm=4, order=True, attributes={"queue.type": "BatchCQ"}))
    m.groups.update(SubscriptionGroupConfig("G1", retry_max_times=3))
    m.groups.update(SubscriptionGroupConfig("G2", consume_enable=False))
    for q in range(4):
        m.offsets.commit_offset("G1", "T1", q, 100 + q)
    m.offsets.commit_offset("G2", "T2", 0, 7)
    m.close()


def imported_lines(caplog: pytest.LogCaptureFixture) -> list[re.Match]:
    return [m for r in caplog.records if (m := IMPORTED.search(r.getMessage()))]


def test_json_files_are_imported_once_then_renamed(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    write_json_store(tmp_path)
    config = tmp_path / "config"
    caplog.set_level(logging.INFO)

    m = open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)
    try:
        [line] = imported_lines(caplog)
        assert line.groups()[:3] == ("301", "2", "5")
        assert sorted(line.group(4).split(",")) == sorted(JSON_FILES)
        assert not any((config / f).exists() for f in JSON_FILES)
        assert all((config / f"{f}.imported").exists() for f in JSON_FILES)
        assert len(m.topics.all_configs()) == 301
        assert m.topics.select("Attr") == TopicConfig("Attr", 1, 2, perm=4, order=True,
                                                      attributes={"queue.type": "BatchCQ"})
        assert m.groups.subscription_group_table["G1"].retry_max_times == 3
        assert m.groups.subscription_group_table["G2"].consume_enable is False
        assert [m.offsets.query_offset("G1", "T1", q) for q in range(4)] == [100, 101, 102, 103]
        assert m.offsets.query_offset("G2", "T2", 0) == 7
        m.topics.update(TopicConfig("AfterImport"))
        m.offsets.commit_offset("G1", "T1", 0, 555)
    finally:
        m.close()

    # JSON mode writes the files again (say an operator switched back and forth, renaming the files back as the
    # README says): RocksDB holds the metadata now, so they are ignored with a warning, neither imported nor renamed.
    for f in JSON_FILES:
        (config / f"{f}.imported").rename(config / f)
    stale = open_managers(StoreType.DEFAULT, tmp_path)
    stale.topics.update(TopicConfig("OnlyInJson"))
    stale.close()
    caplog.clear()
    m = open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)
    try:
        assert imported_lines(caplog) == []
        assert any("metadata_json_ignored" in r.getMessage() and "topics.json" in r.getMessage()
                   for r in caplog.records)
        assert (config / "topics.json").exists()
        assert m.topics.select("OnlyInJson") is None
        assert m.topics.select("AfterImport") is not None and len(m.topics.all_configs()) == 302
        assert m.offsets.query_offset("G1", "T1", 0) == 555
    finally:
        m.close()


def test_an_interrupted_import_is_redone_from_scratch(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Keys without the format marker are what a crash mid-import leaves: they are wiped, the import redone."""
    write_json_store(tmp_path)
    (tmp_path / "metadata").mkdir()
    db = Rdict(str(tmp_path / "metadata"), Options(raw_mode=True))
    db.put(b"t:Half", bytes(18))  # a half-imported topic (encoding version 0 would not even load)
    db.close()
    caplog.set_level(logging.INFO)
    m = open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)
    try:
        assert len(imported_lines(caplog)) == 1
        assert m.topics.select("Half") is None and len(m.topics.all_configs()) == 301
    finally:
        m.close()


def test_a_new_store_imports_nothing_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    m = open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)
    try:
        assert imported_lines(caplog) == []
        assert any("metadata_created" in r.getMessage() for r in caplog.records)
        assert m.topics.all_configs() == []
    finally:
        m.close()


def test_a_corrupt_json_file_stops_the_import_and_imports_nothing(tmp_path: Path):
    write_json_store(tmp_path)
    (tmp_path / "config" / "subscriptionGroup.json").write_text('{"groups": [{"group_name": "G", "bogus": 1}]}')
    with pytest.raises(OSError, match=r"subscriptionGroup\.json"):
        open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)
    assert (tmp_path / "config" / "topics.json").exists()  # nothing renamed
    (tmp_path / "config" / "subscriptionGroup.json").write_text('{"groups": []}')
    m = open_managers(StoreType.DEFAULT_ROCKSDB, tmp_path)  # fixed: the next start imports everything
    try:
        assert len(m.topics.all_configs()) == 301 and m.groups.subscription_group_table == {}
    finally:
        m.close()
