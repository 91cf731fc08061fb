"""Errors that mean the disk refused a write, told apart from bugs: they are logged on one line and answered as
a refusal, without a traceback (the reason is the whole story, and an operator acts on it, not a developer)."""

import errno

from common.refusal import Refusal
from common.response_code import ResponseCode

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DISK_FULL_TEXT = "No space left on device"
OPEN_FILES_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
OPEN_FILES_TEXT = "Too many open files"
OPEN_FILES_HINT = ("too many open files: raise the broker's open-files limit (ulimit -n, systemd LimitNOFILE, docker "
                   "--ulimit nofile)")
DAMAGED_ROCKSDB_HINT = (" (a RocksDB file on disk is damaged: restore that store's directory from a replica or a "
                        "backup; the consume queue's, storeType=defaultRocksDB, may be removed instead: the broker "
                        "rebuilds it from the commitlog)")


def is_rocksdb_io_error(exc: BaseException) -> bool:
    """RocksDB's I/O failure: rocksdict raises it as a bare Exception whose text is RocksDB's status."""
    return type(exc) is Exception and str(exc).startswith("IO error:")


def is_rocksdb_damage(exc: BaseException) -> bool:
    """RocksDB found one of its files damaged (a checksum mismatch, a cut file): its status, in a bare Exception."""
    return type(exc) is Exception and str(exc).startswith("Corruption:")


def is_storage_failure(exc: BaseException) -> bool:
    """Whether a failure is the storage's (the file system's, RocksDB's I/O, e.g. a memtable flush on a full
    disk, or a damaged file) rather than a bug: logged on one line, without a traceback."""
    return isinstance(exc, OSError) or is_rocksdb_io_error(exc) or is_rocksdb_damage(exc)


def is_disk_full(exc: BaseException) -> bool:
    """The file system (or a RocksDB write on it) had no space left."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL_ERRNOS
    return is_rocksdb_io_error(exc) and DISK_FULL_TEXT in str(exc)


def is_out_of_open_files(exc: BaseException) -> bool:
    """The process (or the system) had no file descriptor left."""
    if isinstance(exc, OSError):
        return exc.errno in OPEN_FILES_ERRNOS
    return is_rocksdb_io_error(exc) and OPEN_FILES_TEXT in str(exc)


def storage_hint(exc: BaseException) -> str:
    """What an operator does about a storage failure that stopped a start, for its one line ("": nothing known)."""
    if is_disk_full(exc):
        return " (the disk is full: free space and start again)"
    if is_out_of_open_files(exc):
        return f" ({OPEN_FILES_HINT}, and start again)"
    if is_rocksdb_damage(exc):
        return DAMAGED_ROCKSDB_HINT
    return ""


def disk_full_refusal(exc: BaseException) -> Refusal:
    """What a caller is answered for a write the full disk refused: as the commitlog answers one."""
    return Refusal(ResponseCode.SERVICE_NOT_AVAILABLE, f"disk full: {exc}")
