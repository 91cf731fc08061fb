"""Segments in process memory (``tieredBackendServiceProvider=memory``): for tests; gone with the process."""

import threading
import time

from broker.tiered.provider.file_segment import FileSegment

_objects: dict[str, bytearray] = {}
_written: dict[str, float] = {}  # key -> last write (epoch seconds), for listing
_lock = threading.Lock()


def list_objects(namespace: str, under: str) -> dict[str, float]:
    """Path (below ``namespace``) -> last write, of the objects under ``under/``."""
    prefix = f"{namespace}/{under.strip('/')}/"
    with _lock:
        return {key[len(namespace) + 1:]: when for key, when in _written.items() if key.startswith(prefix)}


class MemoryFileSegment(FileSegment):
    def __init__(self, namespace: str, path: str) -> None:
        super().__init__(path)
        self._key = f"{namespace}/{path}"

    def real_size(self) -> int:
        return len(_objects.get(self._key, b""))

    def write(self, position: int, data: bytes) -> None:
        with _lock:
            buf = _objects.setdefault(self._key, bytearray())
            del buf[position:]
            buf += data
            _written[self._key] = time.time()

    def read(self, position: int, length: int) -> bytes:
        return bytes(_objects.get(self._key, b"")[position : position + length])

    def destroy(self) -> None:
        with _lock:
            _objects.pop(self._key, None)
            _written.pop(self._key, None)
