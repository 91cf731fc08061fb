"""The committed generated modules are exactly what protoc makes from the committed .proto sources, and the
declared dependency floors can import them."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTOS = sorted(p.relative_to(REPO) for p in (REPO / "proto").rglob("*.proto"))  # proto/v2/ too
GENERATED = sorted(p for p in (REPO / "proto").rglob("*") if p.name.endswith(("_pb2.py", "_pb2_grpc.py")))

# The generator writes its own release into what it makes; a patch release of grpcio-tools changes these lines
# and nothing else, so they say nothing about whether the code matches the sources (the floors test checks them).
GRPC_STAMP = re.compile(r"^GRPC_GENERATED_VERSION = '([\d.]+)'$", re.M)
PROTOBUF_STAMP = re.compile(r"^# Protobuf Python Version: ([\d.]+)$", re.M)
PROTOBUF_RUNTIME_CHECK = re.compile(r"(ValidateProtobufRuntimeVersion\(\n\s+_runtime_version\.Domain\.PUBLIC,)"
                                    r"\n\s+\d+,\n\s+\d+,\n\s+\d+,")


def without_generator_stamps(text: str) -> str:
    text = GRPC_STAMP.sub("GRPC_GENERATED_VERSION = <release>", text)
    text = PROTOBUF_STAMP.sub("# Protobuf Python Version: <release>", text)
    return PROTOBUF_RUNTIME_CHECK.sub(r"\1 <release>", text)


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def declared_floor(package: str) -> tuple[int, ...]:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in dependencies if re.match(rf"{package}\s*[><=]", d)]
    floor = re.search(r">=\s*([\d.]+)", spec)
    assert floor, f"{package} has no floor in pyproject.toml: {spec}"
    return release(floor.group(1))


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
        committed, made = ((root / name).read_text() for root in (REPO, tmp_path))
        assert without_generator_stamps(committed) == without_generator_stamps(made), \
            f"{name} is stale: run make proto"


def test_the_declared_floors_import_the_committed_generated_code():
    """Generated code refuses to import on a runtime older than its generator: the floors in pyproject.toml must
    be at least the releases stamped in the committed modules, or an install at the floor cannot start."""
    assert GENERATED
    for path in GENERATED:
        text = path.read_text()
        for stamp, package in ((GRPC_STAMP, "grpcio"), (PROTOBUF_STAMP, "protobuf")):
            for version in stamp.findall(text):
                assert release(version) <= declared_floor(package), \
                    f"{path.relative_to(REPO)} needs {package}>={version}; pyproject.toml allows older"


def test_the_stamps_are_normalised_and_nothing_else():
    committed = (REPO / "proto" / "broker_pb2_grpc.py").read_text()
    bumped = GRPC_STAMP.sub("GRPC_GENERATED_VERSION = '9.9.9'", committed)
    assert bumped != committed and without_generator_stamps(bumped) == without_generator_stamps(committed)
    edited = committed.replace("BrokerServiceStub", "BrokerServiceStubs", 1)
    assert without_generator_stamps(edited) != without_generator_stamps(committed)
    pb2 = (REPO / "proto" / "broker_pb2.py").read_text()
    assert without_generator_stamps(pb2).count("<release>") == 2, "the protobuf stamps were not both found"


def test_generated_modules_import():
    from proto import broker_pb2_grpc, namesrv_pb2_grpc

    assert hasattr(broker_pb2_grpc, "BrokerServiceStub") and hasattr(namesrv_pb2_grpc, "NamesrvServiceStub")
