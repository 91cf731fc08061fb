"""How many messages, and how many bytes of bodies, a producer's sends may have on their way at once (upstream's
``backPressureForAsyncSendNum`` / ``backPressureForAsyncSendSize``).

``send_async`` never waited: a loop of 200,000 of them (1 KiB) took a client to 1 GiB, and 13 % of them failed with
DEADLINE_EXCEEDED while they waited behind the others. Past the bound, a send waits in its caller's thread until
earlier ones finish, for at most the send timeout; then its future fails with nothing sent (a retry stores no second
copy). Room is given back on the thread that settles a send (a stream's reader), never on the callback pool, so a
callback that sends and waits here cannot hold up the answers that make the room.
"""

import threading


class SendBackPressure:
    def __init__(self, max_messages: int, max_bytes: int) -> None:
        assert max_messages > 0 and max_bytes > 0, (max_messages, max_bytes)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.messages = 0
        self.bytes = 0
        self._room = threading.Condition()

    def acquire(self, messages: int, size: int, timeout_s: float) -> bool:
        """Waits until the send fits (a send larger than the whole bound fits when nothing else is on its way);
        False after ``timeout_s`` without room."""
        with self._room:
            if not self._room.wait_for(lambda: self._fits(messages, size), timeout_s):
                return False
            self.messages += messages
            self.bytes += size
            return True

    def release(self, messages: int, size: int) -> None:
        with self._room:
            self.messages -= messages
            self.bytes -= size
            assert self.messages >= 0 and self.bytes >= 0, (self.messages, self.bytes)
            self._room.notify_all()

    def _fits(self, messages: int, size: int) -> bool:
        if self.messages == 0:
            return True
        return self.messages + messages <= self.max_messages and self.bytes + size <= self.max_bytes

    def describe(self) -> str:
        return (f"{self.messages} messages ({self.bytes} bytes) of this producer's sends are on their way, at its "
                f"bound of {self.max_messages} messages or {self.max_bytes} bytes (max_in_flight_messages, "
                "max_in_flight_bytes)")
