"""A TCP forwarder for tests that can make its open connections die without a word: ``freeze()`` stops forwarding
on every connection open now, in both directions, while it keeps reading (and so acknowledging) what either side
sends, as a NAT or firewall that dropped a flow does behind a middlebox. Connections made afterwards are forwarded
as usual: the target is still reachable, only the old connections are dead."""

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class NetFaultProxy:
    def __init__(self, target: str) -> None:
        self.target_host, _, port = target.rpartition(":")
        self.target_port = int(port)
        self.accepted = 0
        self._frozen: set[int] = set()  # generations of connections frozen
        self._generation = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="net-fault-proxy", daemon=True)
        self.addr = ""

    def start(self) -> "NetFaultProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop).result(10)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def freeze(self) -> None:
        """Every connection open now goes silent for good; new ones are forwarded."""
        def bump() -> None:
            self._frozen.add(self._generation)
            self._generation += 1
        self._loop.call_soon_threadsafe(bump)

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            pipes = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pipes:
                task.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        generation = self._generation
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer, generation),
                                 self._pipe(up_reader, writer, generation), return_exceptions=True)
        except asyncio.CancelledError:  # stopped: ends quietly (asyncio's stream callback asks how it ended)
            writer.close()
            up_writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, generation: int) -> None:
        while data := await reader.read(65536):
            if generation in self._frozen:
                continue  # read and dropped: the sender sees its bytes taken, the receiver sees nothing
            writer.write(data)
            await writer.drain()
        writer.close()


@contextmanager
def net_fault_proxy(target: str) -> Iterator[NetFaultProxy]:
    proxy = NetFaultProxy(target).start()
    try:
        yield proxy
    finally:
        proxy.stop()
