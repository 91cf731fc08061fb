"""An exported snapshot's chunks are bounded by bytes as well as entries: 1,000 values of 300 KB in one chunk
exceeded what a gRPC frame may carry (RESOURCE_EXHAUSTED), and nothing could ask for smaller chunks."""

from broker.processor.kv_processor import SNAPSHOT_CHUNK_BYTES, SNAPSHOT_CHUNK_ENTRIES, _take


def test_chunks_of_large_values_stop_at_the_byte_bound_and_lose_nothing() -> None:
    value = b"v" * (1 << 20)
    entries = iter([(b"key-%03d" % i, value) for i in range(80)])  # 80 MiB, far fewer than the entry bound
    chunks = []
    while chunk := _take(entries, SNAPSHOT_CHUNK_ENTRIES):
        chunks.append(chunk)
    assert [len(c) for c in chunks] == [32, 32, 16]
    assert all(sum(len(k) + len(v) for k, v in c[:-1]) < SNAPSHOT_CHUNK_BYTES for c in chunks)
    assert [k for c in chunks for k, _ in c] == [b"key-%03d" % i for i in range(80)]


def test_small_entries_still_come_a_thousand_a_chunk() -> None:
    entries = iter([(b"k%d" % i, b"x") for i in range(2500)])
    assert len(_take(entries, SNAPSHOT_CHUNK_ENTRIES)) == SNAPSHOT_CHUNK_ENTRIES
