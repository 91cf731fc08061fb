"""docker-compose.yml, deploy/*.conf and the Dockerfile agree with each other, with the daemons' flags and with
``make run SLAVE=1`` (cluster/local_cluster.py --with-slave): the same brokers, names, ids, ports and keys.

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
from cluster import local_cluster as launcher
from cluster.local_cluster import LAUNCHER_KEYS, REPLICA_KEYS, Replica, broker_conf, ha_port
from namesrv.main import command as namesrv_command
from proxy.main import command as proxy_command

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
# The brokers of make run SLAVE=1, one compose service each: broker-a's two replicas and broker-b.
PLAN = {plan.name: plan for plan in launcher.broker_plan(launcher.DEFAULT_BROKER_PORTS,
                                                         launcher.DEFAULT_SLAVE_PORT)}
BROKERS = list(PLAN)
REPLICAS = [b for b in BROKERS if PLAN[b].replica_id]
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


def conf_keys(service: str) -> dict[str, str]:
    """The service's broker.conf as written, key -> raw value."""
    path = broker_args(command(service)[1:]).config
    (bind,) = [m for m in mounts(service) if m["target"] == path]
    lines = (REPO / str(bind["source"])).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def volume_of(service: str, path: str) -> dict[str, object]:
    """The mount of ``service`` that holds ``path`` (the deepest), which must be a named volume."""
    holding = [m for m in mounts(service) if PurePosixPath(path).is_relative_to(str(m["target"]))]
    assert holding, f"{service}: {path} is on no mount (it would be lost with the container)"
    volume = max(holding, key=lambda m: len(str(m["target"])))
    assert volume["type"] == "volume" and volume["source"] in (COMPOSE.get("volumes") or {}), \
        f"{service}: {path} should be on a named volume declared under volumes:"
    assert not volume["read_only"]
    return volume


# ---- the services ---------------------------------------------------------------------------------------------
def test_the_services_are_make_run_with_a_slave_from_the_project_image():
    assert set(SERVICES) == {"namesrv", "proxy", *BROKERS}
    assert BROKERS == ["broker-a", "broker-a-s", "broker-b"] and REPLICAS == ["broker-a", "broker-a-s"]
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
    assert conf.broker_name == PLAN[broker].broker_name  # broker-a-s is a replica of broker-a
    assert conf.broker_cluster_name == "DefaultCluster"
    assert conf.broker_id == PLAN[broker].replica_id  # 0 for broker-b; broker-a's replicas 1 and 2
    assert conf.enable_controller_mode is (broker in REPLICAS)
    assert conf.flush_disk_type == "ASYNC_FLUSH"
    assert conf.auto_create_topic_enable is True


@pytest.mark.parametrize("broker", BROKERS)
def test_broker_conf_turns_on_what_make_run_does(broker: str):
    """The README says compose runs the same cluster as ``make run SLAVE=1``: every key the launcher writes, other
    than addresses and paths, has the same value here (slaveReadEnable for the replicas, none of it for
    broker-b), and the ports are the launcher's defaults."""
    here = conf_keys(broker)
    plan = PLAN[broker]
    replica = Replica(plan.replica_id, "namesrv:9876", ha_port(plan.port)) if plan.replica_id else None
    local = broker_conf(plan.broker_name, plan.port, "namesrv:9876", broker, Path("/store"), Path("/tiered"), replica)
    addresses = LAUNCHER_KEYS | REPLICA_KEYS | {"tieredStoreFilePath"}
    expected = {k: str(v) for k, v in local.items() if k not in addresses}
    assert {k: here.get(k) for k in expected} == expected
    assert set(here) - set(local) == set(), "a key make run does not set"
    assert (conf_of(broker).listen_port, conf_of(broker).ha_listen_port) == \
        (plan.port, ha_port(plan.port) if plan.replica_id else 0)


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
    assert volume_of(broker, store) == volumes[0]


def test_brokers_do_not_share_ports_names_or_stores():
    confs = [conf_of(b) for b in BROKERS]
    assert [c.broker_ip1 for c in confs] == BROKERS  # one address per process, the replicas' too
    assert {c.broker_name for c in confs} == {"broker-a", "broker-b"}
    ports = [c.listen_port for c in confs] + [c.ha_listen_port for c in confs if c.enable_controller_mode]
    assert len(set(ports) | {namesrv_params()["port"]}) == len(ports) + 1
    stores = [next(m["source"] for m in mounts(b) if m["target"] == c.store_path_root_dir)
              for b, c in zip(BROKERS, confs, strict=True)]
    assert len(set(stores)) == len(BROKERS)


def test_proxy_serves_the_official_clients_on_the_launchers_port():
    """The RocketMQ 5 proxy, as make run starts it: on all interfaces at the launcher's port, published unchanged,
    asking the name server service for routes."""
    assert command("proxy")[0] == "mqproxy"
    params = proxy_command.make_context("mqproxy", command("proxy")[1:]).params
    assert params["namesrv_addr"] == f"namesrv:{namesrv_params()['port']}"
    assert (params["host"], params["port"]) == ("0.0.0.0", launcher.DEFAULT_PROXY_PORT)
    assert published_ports("proxy") == {launcher.DEFAULT_PROXY_PORT: launcher.DEFAULT_PROXY_PORT}
    assert "namesrv" in depends_on("proxy")


# ---- broker-a's replica group ---------------------------------------------------------------------------------
def test_namesrv_runs_the_controller_with_its_store_on_a_named_volume():
    params = namesrv_params()
    assert params["enable_controller"] is True and params["enable_elect_unclean_master"] is False
    store = str(params["controller_store_path"])
    assert PurePosixPath(store).is_absolute(), "the default (~/store/controller) would be lost with the container"
    volume = volume_of("namesrv", store)
    assert volume["source"] not in {m["source"] for b in BROKERS for m in mounts(b)}


def test_replicas_form_one_group_under_the_name_servers_controller():
    confs = {b: conf_of(b) for b in REPLICAS}
    assert {c.broker_name for c in confs.values()} == {"broker-a"}
    assert sorted(c.broker_id for c in confs.values()) == [1, 2]
    for broker, conf in confs.items():
        assert conf.controller_addr == f"namesrv:{namesrv_params()['port']}", broker
        assert conf.ha_listen_port != 0, f"{broker}: a fixed replication port (the other replica connects to it)"
        assert conf.slave_read_enable is True, broker
        assert conf.ha_listen_port not in published_ports(broker), "replication stays inside the compose network"


def test_the_second_replica_starts_once_the_first_serves():
    """The controller elects a fresh group's first heartbeating replica: broker-a-s waits for broker-a's
    healthcheck, which connects to the address broker-a listens on, so broker-a is the first master."""
    first, second = REPLICAS
    assert SERVICES[second]["depends_on"][first] == {"condition": "service_healthy"}
    conf = conf_of(first)
    test = SERVICES[first]["healthcheck"]["test"]
    assert test[0] == "CMD" and f"('{conf.broker_ip1}', {conf.listen_port})" in " ".join(test)


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
    volumes = [(b, conf_of(b).store_path_root_dir) for b in BROKERS]
    volumes.append(("namesrv", str(volume_of("namesrv", str(namesrv_params()["controller_store_path"]))["target"])))
    for service, store in volumes:
        assert store in runs and f"chown -R {user}:{user}" in runs, \
            f"{service}: {store} must exist in the image, owned by {user}, so a fresh named volume is writable"


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
