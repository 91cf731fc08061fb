"""One owner per store directory: an exclusive ``flock`` on ``<storePathRootDir>/lock``, held for the
process's life (RocketMQ's "Lock failed, MQ already started"). The kernel drops the lock when the process dies,
so a SIGKILLed broker never leaves a stale lock behind; the file keeps the holder's pid for the error."""

import fcntl
import os
from pathlib import Path

LOCK_FILE = "lock"


class StoreLockedError(OSError):
    """Another process holds the store directory; the message names the directory and the holder's pid."""


class StoreLock:
    """``setting``: what names the directory in errors (the broker's ``storePathRootDir``)."""

    def __init__(self, root: Path, owner: str = "broker", setting: str = "storePathRootDir") -> None:
        self.root = root
        self.path = root / LOCK_FILE
        self.owner = owner
        self.setting = setting
        self._fd: int | None = None

    def acquire(self) -> "StoreLock":
        """Take the lock or raise :class:`StoreLockedError`, or OSError naming ``setting`` when the directory
        cannot be made or the lock file opened. Touches nothing else in the directory."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, owner = os.pread(fd, 200, 0).decode(errors="replace").strip().partition(" ")
            os.close(fd)
            raise StoreLockedError(f"store directory {self.root} is in use by pid {pid or '?'} ({owner or 'unknown'}"
                                   f", holding {self.path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {self.owner}\n".encode(), 0)
        self._fd = fd
        return self

    def _open(self) -> int:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # the bare error named only a parent (e.g. '/proc/forbidden'), not the setting
            where = f": {exc.filename!r}" if exc.filename else ""
            raise OSError(f"{self.setting}={self.root}: cannot create the directory or its lock file: "
                          f"{exc.strerror or exc}{where}") from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None
