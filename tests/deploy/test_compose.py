"""docker-compose.yml, deploy/*.conf and the Dockerfile agree with each other and with the daemons' flags.

Docker does not run here, so these checks are what keeps the deployment files correct: every value one file
relies on (a mount path, a port, a service name, a console script) is read from the file that defines it.
"""

import fnmatch
import shlex
import tomllib
from pathlib import Path, PurePosixPath

import pytest
import yaml

from broker.broker_config import load_broker_config
from broker.main import parse_args as broker_args
from cluster.local_cluster import LAUNCHER_KEYS, broker_conf
from namesrv.main import command as namesrv_command

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
BROKERS = ["broker-a", "broker-b"]
DOCKERFILE = (REPO / "Dockerfile").read_text()


# ---- helpers: compose's short and long syntaxes -------------------------------------------------------------
def command(service: str) -> list[str]:
    cmd = SERVICES[service]["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def published_ports(service: str) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for entry in SERVICES[service].get("ports", []):
        if isinstance(entry, dict):
            out[int(entry["target"])] = int(entry["published"])
            continue
        spec = str(entry).split("/")[0]
        parts = spec.split(":")
        assert len(parts) in (2, 3), f"{service}: port {entry!r} publishes no fixed host port"
        out[int(parts[-1])] = int(parts[-2])
    return out


def mounts(service: str) -> list[dict[str, object]]:
    out = []
    for entry in SERVICES[service].get("volumes", []):
        if isinstance(entry, dict):
            out.append({"source": entry["source"], "target": entry["target"],
                        "read_only": bool(entry.get("read_only")), "type": entry.get("type")})
            continue
        source, target, *mode = str(entry).split(":")
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append({"source": source, "target": target, "read_only": "ro" in "".join(mode).split(","),
                    "type": kind})
    return out


def depends_on(service: str) -> set[str]:
    deps = SERVICES[service].get("depends_on", [])
    return set(deps)  # a list of names, or a mapping name -> condition


def conf_of(service: str):
    """The broker.conf the service's command reads, as mounted from the repository."""
    path = broker_args(command(service)[1:]).config
    (bind,) = [m for m in mounts(service) if m["target"] == path]
    return load_broker_config((REPO / str(bind["source"])).read_text())


def namesrv_params() -> dict[str, object]:
    args = command("namesrv")[1:]
    return namesrv_command.make_context("mqnamesrv", args).params


# ---- the services ---------------------------------------------------------------------------------------------
def test_three_services_from_the_project_image():
    assert set(SERVICES) == {"namesrv", *BROKERS}
    images = {SERVICES[s].get("image") for s in SERVICES}
    assert len(images) == 1, f"all services should run the same image, got {images}"
    for name, service in SERVICES.items():
        build = service.get("build")
        context = build if isinstance(build, str) else (build or {}).get("context")
        assert context in (".", "./"), f"{name} is not built from the repository's Dockerfile"


def test_every_command_is_a_console_script_of_the_project():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert command("namesrv")[0] == "mqnamesrv"
    for broker in BROKERS:
        assert command(broker)[0] == "mqbroker"
    for service in SERVICES:
        assert command(service)[0] in scripts, f"{service} runs {command(service)[0]}, not a console script"


def test_namesrv_listens_on_all_interfaces_and_publishes_its_port():
    params = namesrv_params()
    assert params["host"] == "0.0.0.0"
    assert params["port"] == 9876
    assert published_ports("namesrv") == {9876: 9876}


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_mounts_its_conf_read_only_where_its_command_reads_it(broker: str):
    path = broker_args(command(broker)[1:]).config
    assert path == "/etc/rocketmq/broker.conf"
    binds = [m for m in mounts(broker) if m["target"] == path]
    assert len(binds) == 1, f"{broker} mounts nothing at {path}"
    bind = binds[0]
    assert bind["type"] == "bind" and bind["read_only"], f"{broker}: {path} should be a read-only bind mount"
    source = (REPO / str(bind["source"])).resolve()
    assert source.is_file() and source.parent == REPO / "deploy", f"{broker} mounts {source}"


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_conf_parses_without_unknown_keys(broker: str):
    conf = conf_of(broker)
    assert conf.unknown_keys == []
    assert conf.broker_name == broker
    assert conf.broker_cluster_name == "DefaultCluster"
    assert conf.broker_id == 0
    assert conf.flush_disk_type == "ASYNC_FLUSH"
    assert conf.auto_create_topic_enable is True


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_conf_turns_on_what_make_run_does(broker: str):
    """The README says compose runs the same cluster as ``make run``: every key the launcher writes, other than
    addresses and paths, has the same value here."""
    path = broker_args(command(broker)[1:]).config
    (bind,) = [m for m in mounts(broker) if m["target"] == path]
    lines = (REPO / str(bind["source"])).read_text().splitlines()
    here = dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    local = broker_conf(broker, 0, "namesrv:9876", broker, Path("/store"), Path("/tiered"))
    expected = {k: str(v) for k, v in local.items() if k not in LAUNCHER_KEYS and k != "tieredStoreFilePath"}
    assert {k: here.get(k) for k in expected} == expected


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_advertises_its_service_name(broker: str):
    conf = conf_of(broker)
    assert conf.broker_ip1 == broker, "other containers reach a broker by its service name"
    assert SERVICES[broker].get("hostname", broker) == broker


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_publishes_its_listen_port_unchanged(broker: str):
    conf = conf_of(broker)
    assert conf.listen_port != 0
    # the broker registers brokerIP1:listenPort, so the host port has to be the same number
    assert published_ports(broker) == {conf.listen_port: conf.listen_port}


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_finds_the_name_server_service(broker: str):
    conf = conf_of(broker)
    port = namesrv_params()["port"]
    assert conf.namesrv_addrs == [f"namesrv:{port}"]
    assert port in published_ports("namesrv")
    assert "namesrv" in depends_on(broker)


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_store_is_a_named_volume(broker: str):
    store = conf_of(broker).store_path_root_dir
    assert PurePosixPath(store).is_absolute()
    volumes = [m for m in mounts(broker) if m["target"] == store]
    assert len(volumes) == 1, f"{broker}: storePathRootDir {store} is not a mount"
    volume = volumes[0]
    assert volume["type"] == "volume" and volume["source"] in (COMPOSE.get("volumes") or {}), \
        f"{broker}: {store} should be a named volume declared under volumes:"
    assert not volume["read_only"]


def test_brokers_do_not_share_ports_names_or_stores():
    confs = [conf_of(b) for b in BROKERS]
    assert len({c.broker_name for c in confs}) == len(BROKERS)
    assert len({c.listen_port for c in confs} | {namesrv_params()["port"]}) == len(BROKERS) + 1
    stores = [next(m["source"] for m in mounts(b) if m["target"] == c.store_path_root_dir)
              for b, c in zip(BROKERS, confs, strict=True)]
    assert len(set(stores)) == len(BROKERS)


# ---- the image ------------------------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_installs_the_project_on_python_311():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    copies = [rest.split() for kw, rest in instructions if kw == "COPY"]
    assert any(parts[0] == "." for parts in copies), "the project is not copied into the image"
    project_dir = next(parts[-1] for parts in copies if parts[0] == ".")
    runs = " && ".join(rest for kw, rest in instructions if kw == "RUN")
    assert f"pip install {project_dir}" in runs or ("pip install ." in runs and project_dir in (".", "./"))


def test_dockerfile_defaults_to_the_name_server_and_owns_the_store_path():
    instructions = dockerfile_instructions()
    cmd = [rest for kw, rest in instructions if kw == "CMD"]
    assert len(cmd) == 1 and yaml.safe_load(cmd[0])[0] == "mqnamesrv"
    assert not [kw for kw, _ in instructions if kw == "ENTRYPOINT"], "compose commands must run as given"
    user = [rest for kw, rest in instructions if kw == "USER"][-1]
    runs = " ".join(rest for kw, rest in instructions if kw == "RUN")
    for broker in BROKERS:
        store = conf_of(broker).store_path_root_dir
        assert store in runs and f"chown -R {user}:{user}" in runs, \
            f"{store} must exist in the image, owned by {user}, so a fresh named volume is writable"


def test_dockerignore_keeps_local_state_out_but_not_the_sources():
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.split("/")[0], p) for p in patterns)

    for local in (".venv", "run-data", ".git", "broker/__pycache__/main.cpython-311.pyc"):
        assert ignored(local), f"{local} should not be sent to the docker build"
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    needed = ["pyproject.toml", "README.md"] + [p.rstrip("*") + "/__init__.py" for p in packages["include"]]
    for path in needed:
        assert not ignored(path), f"{path} is needed by pip install but .dockerignore drops it"
