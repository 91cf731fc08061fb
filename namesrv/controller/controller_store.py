"""The controller's durable state: every group's ``GroupState`` as one JSON document, ``<dir>/replicas.json``.

A decision is persisted before anyone hears of it, and a write is crash-safe: the new document goes to a temp
file that is fsynced, renamed over the old one, and the directory is fsynced so the rename itself survives a
power cut. A crash at any point leaves either the old document or the new one, never a mix.

The directory is held with an exclusive ``flock`` for the process's life: two controllers deciding over one
store would each overwrite the other's decisions.
"""

import fcntl
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.atomic_file import write_file_atomically
from namesrv.controller.replica_models import GroupState

log = logging.getLogger(__name__)

STATE_FILE = "replicas.json"
LOCK_FILE = "lock"
FORMAT = 1


class ControllerStoreError(RuntimeError):
    """The store cannot be used: unreadable, not our format, or held by another process. One line, for the
    operator."""


class ControllerStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self._lock_fd: int | None = None

    def open(self) -> dict[str, GroupState]:
        """Lock the directory (creating it) and load every group; raises ControllerStoreError."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock()
            # A temp file is what a crash before the rename leaves: the document it would have replaced stands.
            self.path.with_name(STATE_FILE + ".tmp").unlink(missing_ok=True)
            return self._load()
        except OSError as e:
            self.close()
            raise ControllerStoreError(f"controller store {self.directory}: {e.strerror or e}") from None
        except ControllerStoreError:
            self.close()
            raise

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def save(self, groups: Mapping[str, GroupState]) -> None:
        """Replace the document with ``groups``; returns once it is durable (raises OSError otherwise)."""
        document: dict[str, Any] = {"format": FORMAT,
                                    "groups": [groups[name].to_json() for name in sorted(groups)]}
        write_file_atomically(self.path, json.dumps(document, indent=1, sort_keys=True).encode())

    def _lock(self) -> None:
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 100, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ControllerStoreError(f"controller store {self.directory} is in use by pid {holder}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _load(self) -> dict[str, GroupState]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(raw)
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                raise ValueError(f"not a format {FORMAT} document")
            groups = [GroupState.from_json(g) for g in document["groups"]]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # Never start over an unreadable store: an empty one would hand out epoch 1 again.
            raise ControllerStoreError(f"controller store file {self.path} is unreadable: {e}") from None
        return {g.broker_name: g for g in groups}
