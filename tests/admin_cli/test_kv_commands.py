"""mqadmin KV commands end to end: the real CLI as a subprocess against a name server and a kvEnable broker."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from admin_cli.kv_commands import text
from client import Admin, KVClient, MQClientError
from client.kv_snapshot_file import write_snapshot
from common.kv_shard import shard_of
from proto import kv_pb2
from tests.admin_cli.helpers import CLUSTER, fails, mqadmin, ok, ok_json, table_lines
from tests.cluster import Cluster, make_cluster, wait_until

SHARDS = 3


def init_kv(c: Cluster, shards: int = SHARDS) -> str:
    """kvInit on the cluster's only broker; returns once the name server routes every shard."""
    out = ok(c.addr, "kvInit", "-b", "broker-a", "-qn", str(shards))
    with KVClient(c.addr) as kv:
        wait_until(lambda: kv.shards(refresh=True) == shards, timeout=15, what="KV shards routed")
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = make_cluster(tmp_path_factory.mktemp("kv-cli"), ("broker-a",), kvEnable="true")
    try:
        out = init_kv(c)
        lines = table_lines(out, "broker-a")
        assert f"{SHARDS} shards" in out.splitlines()[0]
        assert [line.split()[0] for line in lines[:SHARDS]] == [str(i) for i in range(SHARDS)]
        yield c
    finally:
        c.stop()


def scan(c: Cluster, prefix: str, *flags: str) -> list[tuple[str, str]]:
    return [(row["key"], row["value"]) for row in ok_json(c.addr, "kvScan", "-p", prefix, *flags)]


# -- put / get / delete -------------------------------------------------------------------------------------
def test_put_get_delete_roundtrip(cluster: Cluster):
    assert ok(cluster.addr, "kvPut", "-k", "rt/ключ", "-v", "значение with spaces") == "OK\n"
    assert ok(cluster.addr, "kvGet", "-k", "rt/ключ") == "значение with spaces\n"
    assert ok_json(cluster.addr, "kvGet", "-k", "rt/ключ") == {"key": "rt/ключ", "value": "значение with spaces"}
    ok(cluster.addr, "kvPut", "-k", "rt/ключ", "-v", "")  # an empty value is a value
    assert ok(cluster.addr, "kvGet", "-k", "rt/ключ") == "\n"

    assert ok(cluster.addr, "kvDelete", "-k", "rt/ключ") == "OK\n"
    assert fails(cluster.addr, "kvGet", "-k", "rt/ключ") == "mqadmin kvGet: key rt/ключ not found"
    ok(cluster.addr, "kvDelete", "-k", "rt/ключ")  # deleting an absent key succeeds


def test_get_of_missing_key_fails_with_one_line(cluster: Cluster):
    proc = mqadmin(cluster.addr, "kvGet", "-k", "missing/key")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", "mqadmin kvGet: key missing/key not found\n")


def test_value_that_is_not_utf8_prints_as_bytes_repr(cluster: Cluster):
    with KVClient(cluster.addr) as kv:
        kv.put(b"bin/v", b"\xff\xfeok")
        kv.put(b"bin/\xc3", b"x")  # a key that is not UTF-8 either
    assert ok(cluster.addr, "kvGet", "-k", "bin/v") == "b'\\xff\\xfeok'\n"
    assert scan(cluster, "bin/") == [("bin/v", "b'\\xff\\xfeok'"), ("b'bin/\\xc3'", "x")]  # in byte order
    assert text(b"plain") == "plain" and text(b"\x80") == "b'\\x80'"


def test_a_value_from_a_file_larger_than_a_command_line_can_hold(cluster: Cluster, tmp_path: Path):
    """A value beyond the kernel's 128 KiB limit for one argument could not be put at all; --value-file reads it as
    its bytes are, for kvPut and kvCas, and one over 4 MiB is refused before anything is sent."""
    big = tmp_path / "big.bin"
    value = bytes(range(256)) * 2048  # 512 KiB, not UTF-8 text either
    big.write_bytes(value)
    assert ok(cluster.addr, "kvPut", "-k", "file/big", "--value-file", str(big)) == "OK\n"
    with KVClient(cluster.addr) as kv:
        assert kv.get(b"file/big") == value
    small = tmp_path / "small.txt"
    small.write_bytes(b"from a file")
    assert ok(cluster.addr, "kvPut", "-k", "file/cas", "-v", "one") == "OK\n"
    assert ok(cluster.addr, "kvCas", "-k", "file/cas", "--expect", "one", "--value-file", str(small)) == "applied\n"
    assert ok(cluster.addr, "kvGet", "-k", "file/cas") == "from a file\n"

    too_big = tmp_path / "too-big.bin"
    too_big.write_bytes(b"x" * (4 * 1024 * 1024 + 1))
    assert "more than 4194304 bytes" in fails(cluster.addr, "kvPut", "-k", "file/x", "--value-file", str(too_big))
    assert "exactly one of -v VALUE or --value-file" in fails(cluster.addr, "kvPut", "-k", "file/x")
    assert "exactly one of -v VALUE or --value-file" in fails(cluster.addr, "kvPut", "-k", "file/x", "-v", "a",
                                                              "--value-file", str(small))
    assert "file/x" not in [k for k, _ in scan(cluster, "file/")]


# -- scan ---------------------------------------------------------------------------------------------------
def test_scan_prefix_limit_start_after_and_json(cluster: Cluster):
    keys = [f"scan/{i:02d}" for i in range(12)]  # spread over the shards; a scan merges them in key order
    with KVClient(cluster.addr) as kv:  # seeded through the SDK: kvPut has its own test
        for i, key in enumerate(keys):
            kv.put(key, f"v{i}")
        kv.put("scanner", "not under the prefix")

    expected = [(k, f"v{i}") for i, k in enumerate(keys)]
    assert scan(cluster, "scan/") == expected
    assert scan(cluster, "scan/", "--limit", "5") == expected[:5]
    assert scan(cluster, "scan/", "--limit", "5", "--start-after", "scan/04") == expected[5:10]
    assert scan(cluster, "scan/1") == expected[10:]
    assert scan(cluster, "nothing-here/") == []

    rows = json.loads(ok(cluster.addr, "--json", "kvScan", "-p", "scan/", "--limit", "2"))
    assert rows == [{"key": "scan/00", "value": "v0"}, {"key": "scan/01", "value": "v1"}]

    human = ok(cluster.addr, "kvScan", "-p", "scan/", "--limit", "3").splitlines()
    assert human[0].split() == ["Key", "Value"]
    assert [line.split() for line in human[1:]] == [["scan/00", "v0"], ["scan/01", "v1"], ["scan/02", "v2"]]


# -- cas ----------------------------------------------------------------------------------------------------
def test_cas_applied_and_not_applied(cluster: Cluster):
    assert ok(cluster.addr, "kvCas", "-k", "cas/a", "--expect-absent", "-v", "one") == "applied\n"
    assert fails(cluster.addr, "kvCas", "-k", "cas/a", "--expect-absent", "-v", "two") == \
        "mqadmin kvCas: not applied: current value is one"
    assert ok(cluster.addr, "kvCas", "-k", "cas/a", "--expect", "one", "-v", "two") == "applied\n"
    assert fails(cluster.addr, "kvCas", "-k", "cas/a", "--expect", "one", "-v", "three") == \
        "mqadmin kvCas: not applied: current value is two"
    assert ok(cluster.addr, "kvGet", "-k", "cas/a") == "two\n"
    assert fails(cluster.addr, "kvCas", "-k", "cas/none", "--expect", "x", "-v", "y") == \
        "mqadmin kvCas: not applied: the key is absent"
    assert ok_json(cluster.addr, "kvCas", "-k", "cas/a", "--expect", "two", "-v", "four") == \
        {"key": "cas/a", "applied": True, "value": "four"}

    assert "exactly one of --expect" in fails(cluster.addr, "kvCas", "-k", "cas/a", "-v", "x")
    assert "exactly one of --expect" in fails(cluster.addr, "kvCas", "-k", "cas/a", "--expect", "four",
                                              "--expect-absent", "-v", "x")
    assert ok(cluster.addr, "kvGet", "-k", "cas/a") == "four\n"


def test_cas_not_applied_shows_an_empty_value_and_an_absent_key_apart(cluster: Cluster):
    """An empty current value printed as nothing ("current value is "); a value "absent" as an absent key."""
    ok(cluster.addr, "kvPut", "-k", "cas/empty", "-v", "")
    assert fails(cluster.addr, "kvCas", "-k", "cas/empty", "--expect", "zz", "-v", "b") == \
        "mqadmin kvCas: not applied: current value is ''"
    ok(cluster.addr, "kvPut", "-k", "cas/word", "-v", "absent")
    assert fails(cluster.addr, "kvCas", "-k", "cas/word", "--expect", "zz", "-v", "b") == \
        "mqadmin kvCas: not applied: current value is absent"
    assert fails(cluster.addr, "kvCas", "-k", "cas/never", "--expect", "", "-v", "b") == \
        "mqadmin kvCas: not applied: the key is absent"


# -- bad input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "says"), [
    (("kvPut", "-k", "", "-v", "x"), "key is empty"),
    (("kvPut", "-k", "k" * 1025, "-v", "x"), "key is 1025 bytes"),
    (("kvGet", "-k", "é" * 513), "key is 1026 bytes"),
    (("kvCas", "-k", "k" * 1025, "--expect-absent", "-v", "x"), "key is 1025 bytes"),
    (("kvScan", "-p", "a", "--limit", "0"), "scan limit 0 is outside 1..10000"),
    (("kvScan", "-p", "a", "--limit", "10001"), "scan limit 10001 is outside 1..10000"),
    (("kvInit", "-qn", "4"), "exactly one of -c CLUSTER or -b"),
    (("kvInit", "-c", CLUSTER, "-qn", "0"), "must be positive"),
    (("kvExport", "--shard", "-1", "-f", "x"), "0 or more"),
])
def test_bad_input_fails_with_one_line(cluster: Cluster, args: tuple[str, ...], says: str):
    line = fails(cluster.addr, *args)
    assert line.startswith(f"mqadmin {args[0]}: ") and says in line, line


def test_without_name_server_fails_with_one_line():
    assert "no name server address" in fails(None, "kvGet", "-k", "a")


def test_kv_init_cannot_change_the_number_of_shards(cluster: Cluster):
    line = fails(cluster.addr, "kvInit", "-c", CLUSTER, "-qn", str(SHARDS + 2))
    assert f"already has {SHARDS} shards" in line
    with KVClient(cluster.addr) as kv:
        assert kv.shards(refresh=True) == SHARDS


# -- export / import ----------------------------------------------------------------------------------------
def export_row(c: Cluster, shard: int, path: Path) -> dict:
    row = ok_json(c.addr, "kvExport", "--shard", str(shard), "-f", str(path))
    assert (row["file"], row["shard"], row["total_shards"], row["broker_name"]) == \
        (str(path), shard, SHARDS, "broker-a")
    assert row["commit_log_offset"] > 0 and row["entries"] >= 0
    return row


def test_export_then_import_into_a_fresh_cluster(cluster: Cluster, tmp_path: Path):
    with KVClient(cluster.addr) as kv:
        for i in range(20):
            kv.put(f"exp/{i:02d}", f"value {i}")
    source = scan(cluster, "", "--limit", "10000")
    assert len(source) >= 20

    exported = [export_row(cluster, shard, tmp_path / f"shard-{shard}.snap") for shard in range(SHARDS)]
    assert sum(r["entries"] for r in exported) == len(source)
    human = ok(cluster.addr, "kvExport", "--shard", "0", "-f", str(tmp_path / "again.snap"))
    assert "CommitLog Offset" in human and "Entries" in human
    assert f"shard {SHARDS} does not exist" in fails(cluster.addr, "kvExport", "--shard", str(SHARDS), "-f",
                                                     str(tmp_path / "x"))

    fresh = make_cluster(tmp_path / "fresh", ("broker-a",), kvEnable="true")
    try:
        init_kv(fresh)
        with KVClient(fresh.addr) as kv:
            assert kv.scan(b"") == []
        for row in exported:
            imported = ok_json(fresh.addr, "kvImport", "-f", row["file"])
            assert (imported["shard"], imported["entries"], imported["commit_log_offset"]) == \
                (row["shard"], row["entries"], row["commit_log_offset"])
        assert scan(fresh, "", "--limit", "10000") == source
        assert ok(fresh.addr, "kvScan", "-p", "exp/") == ok(cluster.addr, "kvScan", "-p", "exp/")

        busy = next(r for r in exported if r["entries"] > 0)  # that shard holds the snapshot now: a no-op
        assert ok_json(fresh.addr, "kvImport", "-f", busy["file"])["entries"] == busy["entries"]
        with KVClient(fresh.addr) as kv:  # holds something else now: refused
            kv.put(next(k for k, _ in source if shard_of(k.encode(), SHARDS) == busy["shard"]), "changed")
        assert "already holds data" in fails(fresh.addr, "kvImport", "-f", busy["file"])
    finally:
        fresh.stop()


def test_an_import_cut_short_is_finished_by_the_same_import_again(cluster: Cluster, tmp_path: Path):
    """An import writes its snapshot in batches: one cut short (a crash, a refused batch) left a shard holding part
    of it, which every import then refused, for good. The shard holding some of the snapshot's entries, with the
    snapshot's values, is that case: the same import writes the rest."""
    with KVClient(cluster.addr) as kv:
        for i in range(10):
            kv.put(f"cut/{i:02d}", f"value {i}")
    part = [export_row(cluster, shard, tmp_path / f"part-{shard}.snap") for shard in range(SHARDS)]
    with KVClient(cluster.addr) as kv:
        for i in range(10, 30):
            kv.put(f"cut/{i:02d}", f"value {i}")
    whole = [export_row(cluster, shard, tmp_path / f"whole-{shard}.snap") for shard in range(SHARDS)]
    fresh = make_cluster(tmp_path / "fresh", ("broker-a",), kvEnable="true")
    try:
        init_kv(fresh)
        for row in part:  # what the import cut short had written
            ok_json(fresh.addr, "kvImport", "-f", row["file"])
        for row in whole:
            assert ok_json(fresh.addr, "kvImport", "-f", row["file"])["entries"] == row["entries"]
        assert scan(fresh, "cut/", "--limit", "100") == scan(cluster, "cut/", "--limit", "100")
    finally:
        fresh.stop()


def test_import_of_a_bad_file_fails_with_one_line(cluster: Cluster, tmp_path: Path):
    assert "cannot read KV snapshot" in fails(cluster.addr, "kvImport", "-f", str(tmp_path / "absent.snap"))
    junk = tmp_path / "junk.snap"
    junk.write_bytes(b"not a snapshot at all")
    assert "is not a KV snapshot" in fails(cluster.addr, "kvImport", "-f", str(junk))
    corrupt = tmp_path / "corrupt.snap"
    corrupt.write_bytes(b"RMQKVSNP\x00\x00\x00\x03\xff\xff\xff")
    fails(cluster.addr, "kvImport", "-f", str(corrupt))


def test_kv_init_again_with_the_same_shards_is_a_no_op(cluster: Cluster):
    out = ok(cluster.addr, "kvInit", "-c", CLUSTER, "-qn", str(SHARDS))
    assert "nothing to do" in out
    with KVClient(cluster.addr) as kv:
        assert kv.shards(refresh=True) == SHARDS


def test_kv_init_again_checks_its_target(cluster: Cluster):
    """Once the store existed, an unknown cluster or broker was answered "nothing to do", exit 0."""
    assert fails(cluster.addr, "kvInit", "-c", "Nope", "-qn", str(SHARDS)) == \
        f"mqadmin kvInit: cluster Nope does not exist (known: {CLUSTER})"
    assert "broker nosuch is not registered" in fails(cluster.addr, "kvInit", "-b", "nosuch", "-qn", str(SHARDS))
    assert "nothing to do" in ok(cluster.addr, "kvInit", "-b", "broker-a", "-qn", str(SHARDS))


def test_import_refuses_a_second_header(cluster: Cluster, tmp_path: Path):
    """A snapshot has one header, in its first chunk: one in a later chunk (here of shard 1) was ignored."""
    chunks = [kv_pb2.KvSnapshotChunk(header=kv_pb2.KvSnapshotHeader(shard=shard, total_shards=SHARDS))
              for shard in (0, 1)]
    path = tmp_path / "two-headers.snap"
    write_snapshot(path, chunks)
    assert fails(cluster.addr, "kvImport", "-f", str(path)) == \
        f"mqadmin kvImport: KV snapshot {path} has a second header, in chunk 1 (counting from 0): a snapshot has " \
        "one, in its first chunk"


def test_update_static_topic_cannot_resize_the_kv_store(cluster: Cluster):
    """keys hash over the number of shards: only kvInit creates them, and the brokers refuse a resize too"""
    line = fails(cluster.addr, "updateStaticTopic", "-t", "rmq_sys_KV", "-c", CLUSTER, "-qn", str(SHARDS * 2))
    assert "is the KV store: create it with kvInit" in line
    with Admin(cluster.addr) as admin, pytest.raises(MQClientError, match="number of shards cannot change"):
        admin.static_topics.update_static_topic("rmq_sys_KV", SHARDS * 2, CLUSTER, None)  # past the SDK's check
    with KVClient(cluster.addr) as kv:
        assert kv.shards(refresh=True) == SHARDS


def test_export_refuses_a_path_that_is_not_a_regular_file(cluster: Cluster, tmp_path: Path):
    assert "is not a regular file" in fails(cluster.addr, "kvExport", "--shard", "0", "-f", "/dev/null")
    assert Path("/dev/null").is_char_device()
    assert "is a directory" in fails(cluster.addr, "kvExport", "--shard", "0", "-f", str(tmp_path))
    assert "name a file" in fails(cluster.addr, "kvExport", "--shard", "0", "-f", "")


def test_export_says_why_the_file_cannot_be_written(cluster: Cluster, tmp_path: Path):
    """It said "cannot write /proc/version: No such file or directory": the snapshot is written to a new file
    beside the path (then renamed over it), which /proc cannot hold."""
    line = fails(cluster.addr, "kvExport", "--shard", "0", "-f", "/proc/version")
    assert line.startswith("mqadmin kvExport: cannot write a KV snapshot to /proc/version: /proc cannot hold a new "
                           "file version.tmp (written first, then renamed over version): "), line
    missing = tmp_path / "no-such-dir" / "x.snap"
    assert fails(cluster.addr, "kvExport", "--shard", "0", "-f", str(missing)) == \
        f"mqadmin kvExport: cannot write a KV snapshot to {missing}: directory {missing.parent} does not exist"
