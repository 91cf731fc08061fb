"""Processors, the services they call and the servicers get their collaborators from the controller's wiring;
none of them imports the controller (not even for type hints), so there is no import cycle through it."""

import ast
from pathlib import Path

import pytest

from tests.cluster import REPO

WIRED = sorted([*REPO.glob("broker/processor/*.py"), *REPO.glob("broker/statictopic/*.py"),
                *REPO.glob("broker/*_servicer.py"), *REPO.glob("broker/kv/*.py"), *REPO.glob("broker/tiered/**/*.py"),
                *REPO.glob("broker/transaction/*.py")])


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("path", WIRED, ids=lambda p: str(p.relative_to(REPO)))
def test_does_not_import_the_controller(path: Path) -> None:
    assert "broker.broker_controller" not in imported_modules(path)
