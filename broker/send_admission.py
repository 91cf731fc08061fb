"""How many bytes of unary sends a broker holds at once (upstream bounds its send queue and answers SYSTEM_BUSY
past it). A unary send holds its request from its arrival to its answer, a SYNC_FLUSH one through its fsync: with
no bound, producers sending faster than the disk took a broker from 63 MiB to over 1 GiB (the memory stays with the
allocator), and its health check took seconds to answer. Past the bound a send is answered SYSTEM_BUSY at once,
stored nowhere; the SDK tries another broker. A send whose caller's deadline has passed is not stored either: the
caller was told it failed. Stream sends need no bound here: a stream's frames are read in order, one at a time, and
HTTP/2 flow control holds the rest at the client."""

import contextlib
from collections.abc import Iterator

UNARY_SEND_BYTES_LIMIT = 128 << 20


class SendAdmission:
    def __init__(self, limit: int = UNARY_SEND_BYTES_LIMIT) -> None:
        self.limit = limit
        self.in_flight = 0  # bytes of unary sends between arrival and answer (event loop only)
        self.refused = 0

    @contextlib.contextmanager
    def admitted(self, size: int, time_remaining_s: float | None) -> Iterator[str | None]:
        """Yields None when the send may go on, else why it is refused (SYSTEM_BUSY's remark). A first send is
        always let in, however large: the bound holds back the ones after it."""
        if time_remaining_s is not None and time_remaining_s <= 0:
            self.refused += 1
            yield "the send's deadline passed before the broker took it: not stored"
            return
        if self.in_flight and self.in_flight + size > self.limit:
            self.refused += 1
            yield (f"broker busy: {self.in_flight >> 20} MiB of sends in progress (at most {self.limit >> 20} "
                   "MiB): not stored, send again or to another broker")
            return
        self.in_flight += size
        try:
            yield None
        finally:
            self.in_flight -= size
