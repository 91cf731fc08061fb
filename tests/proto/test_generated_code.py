"""The committed generated modules are exactly what protoc makes from the committed .proto sources."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOS = sorted(p.relative_to(REPO) for p in (REPO / "proto").rglob("*.proto"))  # proto/v2/ too


def test_generated_modules_match_sources(tmp_path: Path):
    assert PROTOS, "no .proto sources"
    for src in PROTOS:
        (tmp_path / src).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / src).write_bytes((REPO / src).read_bytes())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=.",
                    "--grpc_python_out=.", *map(str, PROTOS)], cwd=tmp_path, check=True)
    generated = sorted(p.relative_to(tmp_path) for p in (tmp_path / "proto").rglob("*") if p.suffix in (".py", ".pyi"))
    assert generated, "protoc generated nothing"
    for name in generated:
        assert (REPO / name).exists(), f"{name} is not committed: run make proto"
        assert (REPO / name).read_bytes() == (tmp_path / name).read_bytes(), f"{name} is stale: run make proto"


def test_generated_modules_import():
    from proto import broker_pb2_grpc, namesrv_pb2_grpc

    assert hasattr(broker_pb2_grpc, "BrokerServiceStub") and hasattr(namesrv_pb2_grpc, "NamesrvServiceStub")
