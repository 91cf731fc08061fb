"""``pwrite`` that keeps the GIL for the write: the store's appends into the page cache.

``os.pwrite`` releases the GIL around the system call, as every blocking call in CPython does. For a write into
the page cache (tens of microseconds) that costs more than it saves: while the reput thread runs Python code,
the writer gets the GIL back only when reput drops it, after up to a whole switch interval (5 ms). Measured on
this machine's kind (1 KiB records, batches of 64): a 72 KiB append took 23 us alone but 5.1 ms beside a
CPU-bound thread, and 260-300 us on average inside a broker under produce, where keeping the GIL took it to
40-45 us and the broker from ~80k to ~110k msgs/s.

The call goes through ``ctypes.PyDLL``, whose foreign calls keep the GIL. Other threads wait while the write
runs; that is the point, and what a page-cache write costs them is less than what a GIL hand-back costs the
writer. (When the kernel throttles a writer for dirty pages, they wait for that too. The writer is the thread
that answers requests, which waits in either case.) A buffer ctypes cannot point at (a read-only view) goes
through ``os.pwrite``.
"""

import ctypes
import errno
import os
from typing import Any

_libc = ctypes.PyDLL(None, use_errno=True)
_pwrite = _libc.pwrite
_pwrite.restype = ctypes.c_ssize_t
_pwrite.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]


def pwrite_holding_gil(fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
    """Like ``os.pwrite``: how many bytes were written (fewer on a nearly full disk); OSError on failure."""
    size = len(data) if not isinstance(data, memoryview) else data.nbytes
    while True:
        if isinstance(data, bytes):
            written = _pwrite(fd, data, size, pos)
        else:
            try:
                target: Any = (ctypes.c_char * size).from_buffer(data)
            except TypeError:  # read-only: nothing to point at without a copy
                return os.pwrite(fd, data, pos)
            try:
                written = _pwrite(fd, ctypes.addressof(target), size, pos)
            finally:
                del target  # the export: a bytearray can be resized again once it is gone
        if written >= 0:
            return int(written)
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))
