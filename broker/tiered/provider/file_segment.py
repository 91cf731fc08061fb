"""A file segment: one object of the second tier, an append-only byte stream of bounded size.

The backend only stores bytes at positions; what a segment *is* (type, base offset, committed size, status,
times) is kept by the metadata store. Writes are positioned (``write(position, data)``): after a crash the
flat file re-sends from the size it trusts, overwriting any torn tail the backend kept.

Failures: a backend that cannot do what is asked (a full or failing disk, a mount gone, an object store that is
down, slow or refuses the keys) raises OSError or its client library's own errors; :func:`is_backend_error` tells
those from bugs here, so callers log them on one line and try again later.
"""

from abc import ABC, abstractmethod
from enum import IntEnum


class FileSegmentType(IntEnum):
    COMMIT_LOG = 0
    CONSUME_QUEUE = 1

    @property
    def dir_name(self) -> str:
        return "commitlog" if self is FileSegmentType.COMMIT_LOG else "consumequeue"


class FileSegment(ABC):
    """Bytes of one segment in the backend. ``path`` is relative to the backend's root."""

    def __init__(self, path: str) -> None:
        self.path = path

    @abstractmethod
    def real_size(self) -> int:
        """Bytes the backend holds for this segment (0 if it does not exist)."""

    @abstractmethod
    def write(self, position: int, data: bytes) -> None:
        """Store ``data`` at ``position`` (<= real size) durably; bytes after it are dropped."""

    @abstractmethod
    def read(self, position: int, length: int) -> bytes:
        """``length`` bytes from ``position`` (fewer only past the end)."""

    @abstractmethod
    def destroy(self) -> None:
        """Delete the object (idempotent)."""

    def truncate(self, size: int) -> None:
        """Durably drop the bytes from ``size`` on (none if it holds no more). Every provider's ``write`` drops what
        follows its position, so an empty write is the cut: a posix ftruncate, a memory slice, an S3 deletion of
        the later chunks newest first and an empty chunk at ``size`` (a crash part-way leaves a prefix at least
        ``size`` long: the caller's record must not yet say ``size``). Never extends: a posix write past the end
        would fill the gap with zeros."""
        if self.real_size() > size:
            self.write(size, b"")


BACKEND_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3")  # what the s3 backend's errors come from


def is_backend_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a backend's failure (see the module's doc), as opposed to a bug."""
    return isinstance(exc, OSError) or any(c.__module__.split(".")[0] in BACKEND_LIBRARIES
                                           for c in type(exc).__mro__)
