"""Whole-file JSON persistence (the ``storeType=default`` metadata path): write-temp, fsync, rename."""

import json
from pathlib import Path
from typing import Any

from common.atomic_file import write_file_atomically


def write_json_atomically(path: Path, data: Any, mode: int | None = None) -> None:
    write_file_atomically(path, json.dumps(data, separators=(",", ":")).encode(), mode)


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
