"""Whole-file JSON persistence (the ``storeType=default`` metadata path): write-temp, fsync, rename."""

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.atomic_file import write_file_atomically


def write_json_atomically(path: Path, data: Any, mode: int | None = None) -> None:
    write_file_atomically(path, json.dumps(data, separators=(",", ":")).encode(), mode)


class MetadataFileError(ValueError):
    """A metadata file that does not parse, or holds an entry without a field it needs or with a value that is not
    valid (a hand edit): the broker does not start, and says which file and why."""


@contextlib.contextmanager
def loading(path: Path, remedy: str = "") -> Iterator[None]:
    """Around the reading of ``path`` and the making of its entries: what fails there (a damaged file, a hand edit) is
    a MetadataFileError naming the file and why, with ``remedy`` after it."""
    try:
        yield
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        what = f"an entry has no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
        raise MetadataFileError(f"{path} cannot be loaded: {what}{remedy}") from None


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
