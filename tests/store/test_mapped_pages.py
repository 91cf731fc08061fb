"""Pages readers fault into a segment's mapping are unmapped again once flushed (issue 14: broker RSS), and
reads after that still see every byte, flushed or not."""

from pathlib import Path

from broker.store.mapped_file import PAGE_SIZE, MappedFile
from common.message_codec import decode_record
from tests.store.conftest import StoreFactory


def mapped_rss_kib(path: Path) -> int:
    """Resident KiB of this process's mapping of ``path`` (0 when nothing of it is mapped in)."""
    rss, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's header line
            inside = len(head) == 6 and head[5] == str(path)
        elif inside and head and head[0] == "Rss:":
            rss += int(head[1])
    return rss


def test_release_unmaps_the_flushed_part_and_keeps_every_byte(tmp_path: Path):
    size = 64 * PAGE_SIZE
    f = MappedFile(tmp_path / f"{0:020d}", size)
    try:
        flushed = b"f" * (40 * PAGE_SIZE + 100)
        f.append(flushed)
        f.flush()
        tail = b"t" * (10 * PAGE_SIZE)
        f.append(tail)  # written, not flushed
        assert f.read(0, f.wrote_position) == flushed + tail  # a reader faults every written page in
        before = mapped_rss_kib(f.path)
        assert before >= f.wrote_position // 1024

        f.release_pages()

        # The whole pages below the flushed position left RSS; the page it falls in and the unflushed tail stay.
        released = before - mapped_rss_kib(f.path)
        assert released == 40 * PAGE_SIZE // 1024
        assert f.read(0, f.wrote_position) == flushed + tail  # mapped again from the page cache
    finally:
        f.close()
    assert (tmp_path / f"{0:020d}").read_bytes()[: len(flushed) + len(tail)] == flushed + tail


def test_release_on_a_closed_segment_is_a_no_op(tmp_path: Path):
    f = MappedFile(tmp_path / f"{0:020d}", 4 * PAGE_SIZE)
    f.append(b"x" * 2 * PAGE_SIZE)
    f.flush()
    f.close()
    f.release_pages()


def test_the_store_releases_what_readers_mapped(open_store: StoreFactory):
    store = open_store(mapped_file_size_commit_log=256 * PAGE_SIZE)
    # The release pass runs only when this test says so: its own thread (every 200 ms) would otherwise run between
    # the read and the look at RSS whenever the machine is slow enough.
    store.page_release.shutdown()
    bodies = [bytes([i % 251]) * 1000 for i in range(600)]
    results = [store.put_messages("PagesT", i % 4, [b], [b""]) for i, b in enumerate(bodies)]
    last = results[-1].append
    assert last is not None
    assert store.wait_dispatched(last.end_offset)
    store.flush_service.flush_once()
    segments = store.commit_log.mapped_file_queue.files
    read = [m for q in range(4) for m in store.get_message("PagesT", q, 0, 1000, max_total_bytes=10**9).messages]
    assert sum(mapped_rss_kib(s.path) for s in segments) >= len(bodies)  # ~1 KiB a record, read through mm

    store.page_release.run_once()  # the periodic pass

    assert sum(mapped_rss_kib(s.path) for s in segments) <= len(segments) * PAGE_SIZE // 1024
    again = [m for q in range(4) for m in store.get_message("PagesT", q, 0, 1000, max_total_bytes=10**9).messages]
    assert again == read
    assert sorted(decode_record(m).body for m in again) == sorted(bodies)
