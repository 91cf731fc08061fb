"""``pwrite_holding_gil`` writes what ``os.pwrite`` would, for every buffer the store hands it, and fails alike."""

import errno
import os
from pathlib import Path

import pytest

from broker.store.pwrite_holding_gil import pwrite_holding_gil


def test_each_kind_of_buffer_lands_where_it_was_asked(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, 4096)
        payload = bytearray(os.urandom(300))
        cases: list[tuple[int, bytes | bytearray | memoryview]] = [
            (0, bytes(payload[:100])),  # bytes: pointed at directly
            (100, payload[100:200]),  # a bytearray
            (200, memoryview(payload)[200:300]),  # a slice of a writable view (what WireBatch.encode returns)
            (1000, memoryview(bytes(payload[:50]))),  # read-only: goes through os.pwrite
            (4000, b""),
        ]
        for pos, data in cases:
            assert pwrite_holding_gil(fd, data, pos) == len(data)
        content = path.read_bytes()
        assert content[:300] == payload
        assert content[1000:1050] == payload[:50]
        assert content[300:1000] == bytes(700) and len(content) == 4096
        del cases  # its view of payload
        pwrite_holding_gil(fd, payload, 2000)
        payload.extend(b"x")  # the write let go of the buffer it pointed at: it can be resized again
    finally:
        os.close(fd)


def test_a_failed_write_raises_with_its_errno(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT)
    os.close(fd)
    with pytest.raises(OSError) as raised:
        pwrite_holding_gil(fd, b"closed", 0)
    assert raised.value.errno == errno.EBADF
    with pytest.raises(OSError) as raised:
        pwrite_holding_gil(fd, bytearray(b"closed"), 0)
    assert raised.value.errno == errno.EBADF
