"""The committed generated modules are exactly what protoc makes from the committed .proto sources."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOS = sorted((REPO / "proto").glob("*.proto"))


def test_generated_modules_match_sources(tmp_path: Path):
    assert PROTOS, "no .proto sources"
    (tmp_path / "proto").mkdir()
    for src in PROTOS:
        (tmp_path / "proto" / src.name).write_bytes(src.read_bytes())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--pyi_out=.",
                    "--grpc_python_out=.", *[f"proto/{p.name}" for p in PROTOS]], cwd=tmp_path, check=True)
    generated = sorted(p.name for p in (tmp_path / "proto").iterdir() if not p.name.endswith(".proto"))
    assert generated, "protoc generated nothing"
    for name in generated:
        assert (REPO / "proto" / name).exists(), f"proto/{name} is not committed: run make proto"
        assert (REPO / "proto" / name).read_bytes() == (tmp_path / "proto" / name).read_bytes(), (
            f"proto/{name} is stale: run make proto")


def test_generated_modules_import():
    from proto import broker_pb2_grpc, namesrv_pb2_grpc

    assert hasattr(broker_pb2_grpc, "BrokerServiceStub") and hasattr(namesrv_pb2_grpc, "NamesrvServiceStub")
