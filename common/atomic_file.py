"""Replacing a small file so that a crash leaves the old content or the new, never a torn mix: write a temp file
beside it, fsync, rename over it, fsync the directory (without that the rename itself may not survive). A file
of secrets (``mode`` 0o600) is never readable by others, not even as its temp file."""

import os
from pathlib import Path


def write_file_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """``mode``: the file's permission bits (None: as the umask gives)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)  # a temp file left by a crash keeps its own mode: made anew
        with open(tmp, "wb", opener=lambda p, flags: os.open(p, flags, 0o666 if mode is None else mode)) as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)  # exactly, whatever the umask
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk took part of it: give the space back, keep the old file
        raise
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
