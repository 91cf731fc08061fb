"""Asynchronous channels to the brokers, one per address, opened on first use: the proxy's own gRPC to the cluster
for what the SDK's synchronous clients would block the event loop on (POP, long polling included, and the end of
a transaction).

A channel to an address no route names any more (a broker restarted on another port, one that left the cluster)
is closed once no call started on it for :data:`CHANNEL_IDLE_S` (``drop_unused``, run by the send streams' sweep):
every call made on these channels has a deadline well within that, so none is cut short."""

import time
from collections.abc import Collection

import grpc

from client.client_instance import CHANNEL_OPTIONS
from common import tls
from proto import pop_pb2_grpc, transaction_pb2_grpc

# Longer than any call on a channel takes (a receive's long polling: 20 s at most, every call with its deadline).
CHANNEL_IDLE_S = 300.0


class BrokerChannels:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._pop_services: dict[str, pop_pb2_grpc.PopServiceStub] = {}  # a stub builds a callable per method
        self._transaction_services: dict[str, transaction_pb2_grpc.TransactionServiceStub] = {}
        self._used: dict[str, float] = {}  # address -> when a call last started on its channel

    def channel(self, addr: str) -> grpc.aio.Channel:
        self._used[addr] = time.monotonic()
        ch = self._channels.get(addr)
        if ch is None:  # only the event loop's thread gets here: no lock
            ch = self._channels[addr] = tls.aio_channel(addr, CHANNEL_OPTIONS)
        return ch

    def ready(self, addr: str) -> bool:
        """Whether the channel to ``addr`` is connected now (False when none was opened)."""
        ch = self._channels.get(addr)
        return ch is not None and ch.get_state() is grpc.ChannelConnectivity.READY

    def pop_service(self, addr: str) -> pop_pb2_grpc.PopServiceStub:
        self._used[addr] = time.monotonic()
        stub = self._pop_services.get(addr)
        if stub is None:
            stub = self._pop_services[addr] = pop_pb2_grpc.PopServiceStub(self.channel(addr))
        return stub

    def transaction_service(self, addr: str) -> transaction_pb2_grpc.TransactionServiceStub:
        self._used[addr] = time.monotonic()
        stub = self._transaction_services.get(addr)
        if stub is None:
            stub = self._transaction_services[addr] = transaction_pb2_grpc.TransactionServiceStub(self.channel(addr))
        return stub

    async def drop_unused(self, keep: Collection[str], idle_s: float = CHANNEL_IDLE_S) -> list[str]:
        """Close the channels to addresses not in ``keep`` on which no call started for ``idle_s`` (a later call to
        one opens it again); the addresses closed."""
        now = time.monotonic()
        gone = [addr for addr in self._channels if addr not in keep and now - self._used.get(addr, 0.0) >= idle_s]
        channels = []
        for addr in gone:  # all dropped before the first await: a call meanwhile opens a new channel
            channels.append(self._channels.pop(addr))
            self._pop_services.pop(addr, None)
            self._transaction_services.pop(addr, None)
            self._used.pop(addr, None)
        for ch in channels:
            await ch.close(None)
        return gone

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._used.clear()
        self._pop_services.clear()
        self._transaction_services.clear()
        for ch in channels:
            await ch.close(None)
