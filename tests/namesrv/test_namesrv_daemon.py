"""The mqnamesrv daemon, run as a subprocess and spoken to over gRPC."""

import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.response_code import ResponseCode
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.cluster import REPO, Daemon, start_namesrv, wait_until
from tests.namesrv.helpers import CLUSTER, STATE, register_body_pb, register_request_pb

EMPTY = common_pb2.Empty()


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = start_namesrv(tmp_path_factory.mktemp("namesrv"))
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def stub(namesrv: Daemon) -> Iterator[namesrv_pb2_grpc.NamesrvServiceStub]:
    with grpc.insecure_channel(namesrv.addr) as channel:
        yield namesrv_pb2_grpc.NamesrvServiceStub(channel)


def route(stub: namesrv_pb2_grpc.NamesrvServiceStub, topic: str) -> namesrv_pb2.GetRouteInfoResponse:
    return stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoRequest(topic=topic), timeout=10)


def route_brokers(stub: namesrv_pb2_grpc.NamesrvServiceStub, topic: str) -> list[str]:
    return [qd.broker_name for qd in route(stub, topic).route.queue_datas]


# ---- routes and cluster info -----------------------------------------------------------------------------


def test_two_brokers_route_and_cluster_info(stub: namesrv_pb2_grpc.NamesrvServiceStub):
    for name, port, topics in [("it-a", 20001, ["ItShared", "ItOnlyA"]), ("it-b", 20002, ["ItShared"])]:
        response = stub.RegisterBroker(register_request_pb(name, f"127.0.0.1:{port}", topics), timeout=10)
        assert (response.code, response.need_full) == (ResponseCode.SUCCESS, False)

    shared = route(stub, "ItShared")
    assert shared.code == ResponseCode.SUCCESS
    assert [(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) for qd in shared.route.queue_datas] \
        == [("it-a", 4, 4, 6), ("it-b", 4, 4, 6)]
    assert [(bd.cluster, bd.broker_name, dict(bd.broker_addrs)) for bd in shared.route.broker_datas] == [
        (CLUSTER, "it-a", {0: "127.0.0.1:20001"}), (CLUSTER, "it-b", {0: "127.0.0.1:20002"})]
    assert route_brokers(stub, "ItOnlyA") == ["it-a"]

    info = stub.GetBrokerClusterInfo(EMPTY, timeout=10)
    assert {"it-a", "it-b"} <= set(info.cluster_addr_table[CLUSTER].broker_names)
    assert dict(info.broker_addr_table["it-b"].broker_addrs) == {0: "127.0.0.1:20002"}
    live = {b.broker_addr: b for b in info.live_brokers}
    assert live["127.0.0.1:20001"].topic_count == 2
    assert live["127.0.0.1:20001"].data_version == common_pb2.DataVersion(state_version=STATE, counter=1)
    assert abs(live["127.0.0.1:20001"].last_update_timestamp - time.time() * 1000) < 60_000

    assert {"ItShared", "ItOnlyA"} <= set(stub.GetAllTopicList(EMPTY, timeout=10).topics)
    table = stub.GetNamesrvRuntimeInfo(EMPTY, timeout=10).table
    assert int(table["broker_count"]) >= 2 and int(table["topic_count"]) >= 2
    assert int(table["bytes_per_topic_estimate"]) > 0


def test_unknown_topic_is_a_business_outcome(stub: namesrv_pb2_grpc.NamesrvServiceStub):
    response = route(stub, "NoSuchTopic")
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in response.remark


def test_delta_registration_and_need_full(stub: namesrv_pb2_grpc.NamesrvServiceStub):
    addr = "127.0.0.1:20003"
    stub.RegisterBroker(register_request_pb("it-delta", addr, ["DeltaKeep", "DeltaGone"], counter=1), timeout=10)
    delta = register_request_pb("it-delta", addr, ["DeltaNew"], counter=2, full=False, base=1)
    delta.body.deleted_topics.append("DeltaGone")
    assert not stub.RegisterBroker(delta, timeout=10).need_full
    assert route_brokers(stub, "DeltaNew") == ["it-delta"]
    assert route(stub, "DeltaGone").code == ResponseCode.TOPIC_NOT_EXIST

    stale = register_request_pb("it-delta", addr, ["DeltaStale"], counter=4, full=False, base=3)
    response = stub.RegisterBroker(stale, timeout=10)
    assert response.code == ResponseCode.SUCCESS and response.need_full and response.remark
    assert route(stub, "DeltaStale").code == ResponseCode.TOPIC_NOT_EXIST


def test_compressed_registration(stub: namesrv_pb2_grpc.NamesrvServiceStub):
    request = register_request_pb("it-zip", "127.0.0.1:20004", [])
    body = register_body_pb([f"Zipped{i}" for i in range(500)])
    body.topic_queue_mapping_info["Zipped0"].CopyFrom(common_pb2.TopicQueueMappingInfo(
        topic="Zipped0", scope="__global__", total_queues=4, bname="it-zip", epoch=7, curr_id_map={0: 0, 3: 1}))
    request.compressed_body = zlib.compress(body.SerializeToString())
    assert stub.RegisterBroker(request, timeout=10).code == ResponseCode.SUCCESS
    assert route_brokers(stub, "Zipped499") == ["it-zip"]
    mapping = route(stub, "Zipped0").route.topic_queue_mapping_by_broker["it-zip"]
    assert (mapping.epoch, dict(mapping.curr_id_map)) == (7, {0: 0, 3: 1})


def test_delete_topic_and_unregister(stub: namesrv_pb2_grpc.NamesrvServiceStub):
    stub.RegisterBroker(register_request_pb("it-del-a", "127.0.0.1:20005", ["DelT"], cluster="c1"), timeout=10)
    stub.RegisterBroker(register_request_pb("it-del-b", "127.0.0.1:20006", ["DelT"], cluster="c2"), timeout=10)
    response = stub.DeleteTopicInNamesrv(namesrv_pb2.DeleteTopicInNamesrvRequest(topic="DelT", cluster_name="c1"),
                                         timeout=10)
    assert response.code == ResponseCode.SUCCESS
    assert route_brokers(stub, "DelT") == ["it-del-b"]

    response = stub.UnregisterBroker(namesrv_pb2.UnregisterBrokerRequest(
        cluster_name="c2", broker_name="it-del-b", broker_id=0, broker_addr="127.0.0.1:20006"), timeout=10)
    assert response.code == ResponseCode.SUCCESS
    assert route(stub, "DelT").code == ResponseCode.TOPIC_NOT_EXIST


# ---- malformed requests and hostile bytes ----------------------------------------------------------------


def _with(request: namesrv_pb2.RegisterBrokerRequest, **changes: object) -> namesrv_pb2.RegisterBrokerRequest:
    for name, value in changes.items():
        setattr(request, name, value)
    return request


BAD_REQUESTS = [
    ("GetRouteInfoByTopic", namesrv_pb2.GetRouteInfoRequest(topic=""), "empty topic"),
    ("DeleteTopicInNamesrv", namesrv_pb2.DeleteTopicInNamesrvRequest(topic=""), "empty topic"),
    ("RegisterBroker", _with(register_request_pb("", "127.0.0.1:1", ["T"])), "broker_name"),
    ("RegisterBroker", _with(register_request_pb("b", "", ["T"])), "broker_addr"),
    ("RegisterBroker", _with(register_request_pb("b", "127.0.0.1:1", ["T"], cluster="")), "cluster_name"),
    ("RegisterBroker", _with(register_request_pb("b", "127.0.0.1:1", []), compressed_body=b"not zlib at all"),
     "not valid zlib"),
    ("RegisterBroker", _with(register_request_pb("b", "127.0.0.1:1", []),
                             compressed_body=zlib.compress(b"\xff\xff\xff garbage")), "not a RegisterBrokerBody"),
    ("RegisterBroker", _with(register_request_pb("b", "127.0.0.1:1", []),
                             compressed_body=zlib.compress(register_body_pb(["T"]).SerializeToString())[:-6]),
     "truncated"),
    ("RegisterBroker", register_request_pb("b", "127.0.0.1:1", [""]), "empty topic_name"),
]


@pytest.mark.parametrize(("method", "request_pb", "says"), BAD_REQUESTS)
def test_malformed_request_is_invalid_argument(stub: namesrv_pb2_grpc.NamesrvServiceStub, method: str,
                                               request_pb: object, says: str):
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, method)(request_pb, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in caught.value.details()
    assert route(stub, "T").code == ResponseCode.TOPIC_NOT_EXIST  # nothing was registered on the way


@pytest.mark.parametrize("garbage", [b"\x00" * 64 + bytes(range(256)) * 8, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                     b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 4096])
def test_garbage_bytes_do_not_kill_the_server(namesrv: Daemon, stub: namesrv_pb2_grpc.NamesrvServiceStub,
                                              garbage: bytes):
    host, port = namesrv.addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(garbage)
        sock.settimeout(5)
        try:
            while sock.recv(4096):  # until the server gives up on us
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    assert namesrv.alive
    assert route(stub, "NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST


# ---- expiry ----------------------------------------------------------------------------------------------


def test_silent_broker_expires_while_a_heartbeating_one_stays(tmp_path: Path):
    daemon = start_namesrv(tmp_path, "--broker-expiry-ms", "1500", "--scan-interval-ms", "200")
    try:
        with grpc.insecure_channel(daemon.addr) as channel:
            stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
            stub.RegisterBroker(register_request_pb("silent", "127.0.0.1:21001", ["Exp"]), timeout=10)
            last_silent_heartbeat = time.monotonic()
            stub.RegisterBroker(register_request_pb("alive", "127.0.0.1:21002", ["Exp"]), timeout=10)
            counter = [1]

            def heartbeat_then_silent_gone() -> bool:
                counter[0] += 1
                delta = register_request_pb("alive", "127.0.0.1:21002", [], counter=counter[0], full=False,
                                            base=counter[0] - 1)
                assert not stub.RegisterBroker(delta, timeout=10).need_full
                return route_brokers(stub, "Exp") == ["alive"]

            wait_until(heartbeat_then_silent_gone, timeout=10, interval=0.1, what="silent broker to expire")
            idle = time.monotonic() - last_silent_heartbeat
            assert 1.4 < idle < 6, f"expired after {idle:.2f}s, configured 1.5s"
            assert route_brokers(stub, "Exp") == ["alive"]
        wait_until(lambda: "broker_expired" in daemon.log(), timeout=5, what="expiry log line")
        assert "broker=silent" in daemon.log() and "broker=alive" not in daemon.log().split("broker_expired")[-1]
    finally:
        daemon.stop()


# ---- process behaviour -----------------------------------------------------------------------------------


def test_ready_line_has_the_real_port(namesrv: Daemon):
    ready = [line for line in namesrv.stdout_lines if "ready on" in line]
    assert len(ready) == 1
    host, port = namesrv.addr.rsplit(":", 1)
    assert ready[0] == f"mqnamesrv ready on 127.0.0.1:{port}" and int(port) > 0
    socket.create_connection((host, int(port)), timeout=5).close()


def test_sigterm_exits_zero_and_stops_listening(tmp_path: Path):
    daemon = start_namesrv(tmp_path)
    with grpc.insecure_channel(daemon.addr) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        assert route(stub, "Any").code == ResponseCode.TOPIC_NOT_EXIST
    assert daemon.stop(signal.SIGTERM, timeout=15) == 0
    assert "namesrv_stopped" in daemon.log()
    with pytest.raises(OSError):
        socket.create_connection(tuple(daemon.addr.rsplit(":", 1)), timeout=2).close()


def test_sigint_exits_zero(tmp_path: Path):
    daemon = start_namesrv(tmp_path)
    assert daemon.stop(signal.SIGINT, timeout=15) == 0


@pytest.mark.parametrize("args", [["--bogus"], ["-p", "notaport"], ["-p", "70000"], ["--broker-expiry-ms", "0"]])
def test_bad_flag_is_one_line_without_traceback(args: list[str]):
    done = subprocess.run([sys.executable, "-m", "namesrv.main", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("mqnamesrv: error:")
    assert done.stdout == ""


def test_port_in_use_is_one_line_without_traceback(namesrv: Daemon):
    port = namesrv.addr.rsplit(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", "namesrv.main", "-p", port], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "mqnamesrv: error:" in line]
    assert len(errors) == 1 and f"cannot listen on 127.0.0.1:{port}" in errors[0]
    assert "Traceback" not in done.stderr
    assert "ready on" not in done.stdout
