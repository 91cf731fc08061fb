"""Replacing a small file so that a crash leaves the old content or the new, never a torn mix: write a temp file
beside it, fsync, rename over it, fsync the directory (without that the rename itself may not survive)."""

import os
from pathlib import Path


def write_file_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
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
