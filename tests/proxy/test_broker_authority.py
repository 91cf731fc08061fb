"""The proxy asks a master broker whether a call may proceed (ACL on); which masters there are it reads from
the name servers every 30 s. While no name server answers, it keeps asking the masters it read last, so a name
server outage does not refuse every v2 call. A real gRPC ACL service on a real socket stands for the broker."""

import asyncio
import logging

import grpc
import pytest

from client.errors import MQClientError
from common.acl import AclError
from proto import acl_pb2, acl_pb2_grpc
from proxy import proxy_acl
from proxy.broker_channels import BrokerChannels
from proxy.proxy_acl import BrokerAuthority


class Allow(acl_pb2_grpc.AclServiceServicer):
    async def Authorize(self, request, context):
        return acl_pb2.AclAuthorizeResponse(status=grpc.StatusCode.OK.value[0])


def test_the_masters_read_last_are_asked_while_no_name_server_answers(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger=proxy_acl.__name__)
    request = acl_pb2.AclAuthorizeRequest(authorization="x", method="SendMessage")

    async def scenario() -> None:
        server = grpc.aio.server()
        acl_pb2_grpc.add_AclServiceServicer_to_server(Allow(), server)
        addr = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        reads: list[int] = []

        def masters() -> list[str]:
            reads.append(1)
            if len(reads) > 1:
                raise MQClientError("cluster info failed at ns: DEADLINE_EXCEEDED: Deadline Exceeded")
            return [addr]

        try:
            authority = BrokerAuthority(masters, BrokerChannels())
            assert (await authority.ask(request)).status == 0 and len(reads) == 1
            monkeypatch.setattr(proxy_acl, "BROKERS_TTL_S", 0.0)  # due for a read at every call now
            for _ in range(3):
                assert (await authority.ask(request)).status == 0  # the broker read before answers
            assert len(reads) == 4
            kept = [r for r in caplog.records if "acl_brokers_kept" in r.getMessage()]
            assert len(kept) == 1 and addr in kept[0].getMessage()  # said once while it lasts

            def none() -> list[str]:
                raise MQClientError("cluster info failed at ns: UNAVAILABLE")

            with pytest.raises(AclError, match="cannot find a broker to check the caller's credentials"):
                await BrokerAuthority(none, BrokerChannels()).ask(request)  # nothing read before: a clear refusal
        finally:
            await server.stop(None)

    asyncio.run(scenario())
