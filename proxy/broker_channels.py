"""Asynchronous channels to the brokers, one per address, opened on first use: the proxy's own gRPC to the cluster
for what the SDK's synchronous clients would block the event loop on (POP, long polling included, and the end of
a transaction)."""

import grpc

from client.client_instance import CHANNEL_OPTIONS
from common import tls
from proto import pop_pb2_grpc, transaction_pb2_grpc


class BrokerChannels:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._pop_services: dict[str, pop_pb2_grpc.PopServiceStub] = {}  # a stub builds a callable per method
        self._transaction_services: dict[str, transaction_pb2_grpc.TransactionServiceStub] = {}

    def channel(self, addr: str) -> grpc.aio.Channel:
        ch = self._channels.get(addr)
        if ch is None:  # only the event loop's thread gets here: no lock
            ch = self._channels[addr] = tls.aio_channel(addr, CHANNEL_OPTIONS)
        return ch

    def ready(self, addr: str) -> bool:
        """Whether the channel to ``addr`` is connected now (False when none was opened)."""
        ch = self._channels.get(addr)
        return ch is not None and ch.get_state() is grpc.ChannelConnectivity.READY

    def pop_service(self, addr: str) -> pop_pb2_grpc.PopServiceStub:
        stub = self._pop_services.get(addr)
        if stub is None:
            stub = self._pop_services[addr] = pop_pb2_grpc.PopServiceStub(self.channel(addr))
        return stub

    def transaction_service(self, addr: str) -> transaction_pb2_grpc.TransactionServiceStub:
        stub = self._transaction_services.get(addr)
        if stub is None:
            stub = self._transaction_services[addr] = transaction_pb2_grpc.TransactionServiceStub(self.channel(addr))
        return stub

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._pop_services.clear()
        self._transaction_services.clear()
        for ch in channels:
            await ch.close(None)
