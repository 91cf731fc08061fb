"""Open Telemetry streams, by client id: where the proxy pushes commands to a v2 client.

A client opens one Telemetry stream to the proxy, reports its settings on it and keeps it open for its life; the
proxy answers the settings on it, and pushes server-initiated commands there (the transaction work's
``recover_orphaned_transaction_command`` goes to a producer that publishes the half message's topic). This is the
only state the proxy keeps, and it is the connections' own: a client that reconnects elsewhere reopens it there."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from proto.v2 import definition_pb2, service_pb2
from proxy.proxy_acl import SettingsCheck, current_settings_check, current_user

log = logging.getLogger(__name__)

OnCommand = Callable[["TelemetryChannel", service_pb2.TelemetryCommand],
                     Awaitable[service_pb2.TelemetryCommand | None]]


@dataclass(eq=False)
class TelemetryChannel:
    client_id: str
    user: str | None = None  # who opened it (ACL on): a client id alone proves nothing, any caller may name it
    peer: str = ""  # the connection it came on (gRPC's peer: address and port), the client's other calls come too
    settings: definition_pb2.Settings | None = None  # the client's last reported settings
    may_claim: SettingsCheck | None = None  # its caller's settings check (ACL on): asked again before a push
    outbox: asyncio.Queue[service_pb2.TelemetryCommand | None] = field(default_factory=asyncio.Queue)

    def send(self, command: service_pb2.TelemetryCommand) -> None:
        """Queue a command to the client (written in order, after what is queued already)."""
        self.outbox.put_nowait(command)

    def close(self) -> None:
        """End the stream (the client reopens it if it still runs)."""
        self.outbox.put_nowait(None)

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else definition_pb2.CLIENT_TYPE_UNSPECIFIED

    @property
    def publishing_topics(self) -> frozenset[str]:
        if self.settings is None or not self.settings.HasField("publishing"):
            return frozenset()
        return frozenset(topic.name for topic in self.settings.publishing.topics)


class TelemetryChannels:
    def __init__(self) -> None:
        self._by_client: dict[str, TelemetryChannel] = {}
        self._closing = False
        self.on_client_gone: list[Callable[[str], None]] = []  # told when a client's last stream ended

    def get(self, client_id: str) -> TelemetryChannel | None:
        return self._by_client.get(client_id)

    def online(self, client_id: str) -> bool:
        """Whether the client has its stream open here (auto-renew works only for such a client)."""
        return client_id in self._by_client

    def speaks_for(self, client_id: str, user: str | None, peer: str) -> bool:
        """Whether a call from connection ``peer`` (by ``user``, ACL on) may act as ``client_id`` on what the proxy
        keeps for it: any caller may name a client id, so one with a stream here is spoken for only by the user
        that opened it (ACL on) or over the stream's own connection (ACL off; the official clients make every call
        of an endpoint on one connection). A client id without a stream here has nothing of another's to lose."""
        channel = self._by_client.get(client_id)
        if channel is None:
            return True
        if user is not None or channel.user is not None:
            return channel.user == user
        return channel.peer == peer

    def may_replace(self, client_id: str, user: str | None) -> bool:
        """Whether ``user`` (ACL on) may open a stream as ``client_id``, replacing the one it has here: only the user
        that opened it. Anyone else would end the client's stream, and with it (when the newcomer left) the
        renewing of the messages it holds, which then went to other consumers while it still handled them. ACL
        off, any caller may: a client rebuilding its stream comes on a new connection, and none can be told
        apart."""
        channel = self._by_client.get(client_id)
        if channel is None or (user is None and channel.user is None):
            return True
        return channel.user == user

    def producers_of(self, topic: str) -> list[TelemetryChannel]:
        """Producers connected here that said they publish to ``topic``."""
        return [ch for ch in self._by_client.values()
                if ch.client_type == definition_pb2.PRODUCER and topic in ch.publishing_topics]

    def __len__(self) -> int:
        return len(self._by_client)

    async def serve(self, client_id: str, requests: AsyncIterator[service_pb2.TelemetryCommand],
                    on_command: OnCommand, peer: str = "") -> AsyncIterator[service_pb2.TelemetryCommand]:
        """Run one client's stream (from connection ``peer``): each command it sends is handled by ``on_command``
        (whose answer, if any, is written back), and whatever is queued on its channel is written; ends when the
        client closes its side or the channel is closed (a newer stream of the same client, or the proxy
        stopping)."""
        channel = TelemetryChannel(client_id, current_user(), peer, may_claim=current_settings_check())
        if self._closing:
            return
        older = self._by_client.get(client_id)
        if older is not None:
            older.close()  # the client rebuilt its stream: the old one is dead to it
        self._by_client[client_id] = channel
        reader = asyncio.create_task(self._read(channel, requests, on_command), name=f"telemetry-{client_id}")
        outgoing: asyncio.Task[service_pb2.TelemetryCommand | None] | None = None
        log.info("telemetry_opened client_id=%s clients=%d", client_id, len(self._by_client))
        try:
            while True:
                outgoing = asyncio.create_task(channel.outbox.get())
                await asyncio.wait({outgoing, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not outgoing.done():  # the client closed its side (or its stream broke)
                    break
                command = outgoing.result()
                if command is None:
                    break
                yield command
        finally:  # also when the call is cancelled (the client went away) while waiting
            for task in (outgoing, reader):
                if task is not None and not task.done():
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if self._by_client.get(client_id) is channel:
                del self._by_client[client_id]
                for listener in self.on_client_gone:
                    listener(client_id)
            log.info("telemetry_closed client_id=%s clients=%d", client_id, len(self._by_client))

    @staticmethod
    async def _read(channel: TelemetryChannel, requests: AsyncIterator[service_pb2.TelemetryCommand],
                    on_command: OnCommand) -> None:
        async for command in requests:
            answer = await on_command(channel, command)
            if answer is not None:
                channel.send(answer)

    def close_all(self) -> None:
        """The proxy is stopping: end every stream (clients reconnect to another proxy), refuse new ones."""
        self._closing = True
        for channel in list(self._by_client.values()):
            channel.close()
