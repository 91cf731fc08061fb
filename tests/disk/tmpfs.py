"""Small real file systems for disk-pressure tests: a tmpfs mounted where this process may (root), filled to the
last byte on demand. Tests pick the real disk or their simulated one at run time; both paths are real tests."""

import errno
import os
import subprocess
from pathlib import Path

FILLER = "filler"


def _run(*cmd: str) -> int:
    return subprocess.run(cmd, capture_output=True, check=False).returncode


def try_mount_tmpfs(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (e.g. ``24m``) on ``path``; False where this process may not."""
    return os.geteuid() == 0 and _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)) == 0


def remount_tmpfs(path: Path, size: str) -> None:
    assert _run("mount", "-o", f"remount,size={size}", str(path)) == 0, f"cannot remount {path}"


def unmount(path: Path) -> None:
    if _run("umount", str(path)) != 0:
        _run("umount", "-l", str(path))  # a process the test could not stop still holds it


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_file_system(path: Path) -> None:
    """Write ``path/filler`` until the file system has not one byte left."""
    fd = os.open(path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (65536, 4096, 1):  # big writes first, then the last partial page byte by byte
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def remove_filler(path: Path) -> None:
    (path / FILLER).unlink(missing_ok=True)
