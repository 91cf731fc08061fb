"""Decoding registrations: body choice, base version presence, compressed-body limits."""

import zlib

import pytest

from namesrv import route_codec
from namesrv.route_codec import MalformedRequest, register_request_from_proto
from namesrv.route_models import DataVersion, TopicConfig, TopicQueueMappingInfo
from proto import common_pb2
from tests.namesrv.helpers import STATE, register_body_pb, register_request_pb


def test_plain_body_is_decoded():
    request = register_request_pb("b", "h:1", ["T1", "T2"], counter=3, broker_id=1, heartbeat_timeout_ms=500)
    request.body.deleted_topics.append("Old")
    request.body.topic_queue_mapping_info["T1"].CopyFrom(common_pb2.TopicQueueMappingInfo(
        topic="T1", scope="__global__", total_queues=2, bname="b", epoch=9, dirty=True, curr_id_map={1: 0}))
    decoded = register_request_from_proto(request)
    assert (decoded.broker_name, decoded.broker_id, decoded.broker_addr, decoded.full) == ("b", 1, "h:1", True)
    assert decoded.data_version == DataVersion(STATE, 3) and decoded.base_version is None
    assert list(decoded.topic_configs) == [TopicConfig("T1", 4, 4, 6), TopicConfig("T2", 4, 4, 6)]
    assert list(decoded.deleted_topics) == ["Old"]
    assert decoded.topic_queue_mapping_infos == {"T1": TopicQueueMappingInfo("T1", "__global__", 2, "b", 9, True,
                                                                             {1: 0})}
    assert decoded.heartbeat_timeout_ms == 500


def test_base_version_is_kept_only_when_set():
    assert register_request_from_proto(register_request_pb("b", "h:1", [], full=False, base=0)).base_version == \
        DataVersion(STATE, 0)
    assert register_request_from_proto(register_request_pb("b", "h:1", [], full=False)).base_version is None


def test_compressed_body_wins_over_plain_body():
    request = register_request_pb("b", "h:1", ["Plain"])
    request.compressed_body = zlib.compress(register_body_pb(["Zipped"]).SerializeToString())
    assert [c.topic_name for c in register_request_from_proto(request).topic_configs] == ["Zipped"]


def test_a_body_inflating_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(route_codec, "MAX_INFLATED_BODY_BYTES", 1000)
    request = register_request_pb("b", "h:1", [])
    request.compressed_body = zlib.compress(register_body_pb([f"T{i}" for i in range(200)]).SerializeToString())
    with pytest.raises(MalformedRequest, match="inflates beyond 1000 bytes"):
        register_request_from_proto(request)


@pytest.mark.parametrize(("changes", "says"), [
    ({"broker_id": -1}, "negative broker_id"),
    ({"heartbeat_timeout_ms": -5}, "negative heartbeat_timeout_ms"),
    ({"broker_name": "", "cluster_name": ""}, "without cluster_name, broker_name"),
])
def test_bad_fields_are_named(changes: dict[str, object], says: str):
    request = register_request_pb("b", "h:1", ["T"])
    for name, value in changes.items():
        setattr(request, name, value)
    with pytest.raises(MalformedRequest, match=says):
        register_request_from_proto(request)
