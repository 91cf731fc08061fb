"""A client's generated stubs are made once per (service, address): building one creates a callable for every method
of its service, which cost more than a local call's round trip when done per call."""

import pytest

from client import Message, MQClientError, Producer
from client.client_instance import ClientInstance
from proto import broker_pb2_grpc, kv_pb2_grpc


def test_a_stub_is_made_once_per_service_and_address_and_forgotten_on_close():
    client = ClientInstance("127.0.0.1:1")
    a = client.broker("127.0.0.1:2")
    assert client.broker("127.0.0.1:2") is a
    assert client.stub(broker_pb2_grpc.BrokerServiceStub, "127.0.0.1:2") is a
    assert client.broker("127.0.0.1:3") is not a
    kv = client.stub(kv_pb2_grpc.KvServiceStub, "127.0.0.1:2")
    assert isinstance(kv, kv_pb2_grpc.KvServiceStub)
    assert client.stub(kv_pb2_grpc.KvServiceStub, "127.0.0.1:2") is kv
    client.close()
    # Closed: no channel is opened again (nobody would close it, nor end its streams' threads).
    with pytest.raises(MQClientError, match=r"the client is closed: no call to 127\.0\.0\.1:2"):
        client.broker("127.0.0.1:2")
    with pytest.raises(MQClientError, match="the client is closed"):
        client.send_stream("127.0.0.1:2")
    client.close()  # twice is fine


def test_a_closed_producer_refuses_to_send_instead_of_reconnecting():
    producer = Producer("127.0.0.1:1")
    producer.close()
    with pytest.raises(MQClientError, match="the client is closed"):
        producer.send(Message("T", b"late"))
