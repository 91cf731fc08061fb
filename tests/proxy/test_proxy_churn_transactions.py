"""Who mqproxy keeps as a producer of a topic for its transaction checks: a client whose half messages come with its
Telemetry stream open here (checks reach it there; the stream's end takes it out), never one without a stream:
before, every client id that sent a half message was kept for the proxy's life (only a stream's end or a
NotifyClientTermination took one out), and its topic's group heartbeated for as long. In process."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from proto.v2 import definition_pb2, service_pb2
from proxy.processor.transaction_processor import TransactionProcessor
from proxy.telemetry_channels import TelemetryChannel, TelemetryChannels


def processor_with(channels: TelemetryChannels) -> tuple[TransactionProcessor, list[tuple[str, ...]]]:
    """A processor whose check sessions are only recorded: the topics they would heartbeat, at each change."""
    processor = TransactionProcessor(channels, producer=object())  # type: ignore[arg-type]  # never sends here
    synced: list[tuple[str, ...]] = []

    async def sync() -> None:  # as the real one: a topic whose producers all left is dropped
        for topic in [t for t, clients in processor._publishers.items() if not clients]:
            del processor._publishers[topic]
        synced.append(tuple(sorted(processor._publishers)))

    processor._sync = sync  # type: ignore[method-assign]
    return processor, synced


def test_half_messages_from_clients_without_a_telemetry_stream_keep_nothing():
    async def scenario() -> tuple[dict[str, Any], list[tuple[str, ...]]]:
        processor, synced = processor_with(TelemetryChannels())
        for i in range(100):  # what send_half_message tells it before each half message
            await processor.publishes(f"no-stream-{i}", ["TxT"])
        return processor._publishers, synced

    publishers, synced = asyncio.run(scenario())
    assert publishers == {} and synced == []


def test_a_client_with_its_stream_open_gets_the_checks_until_it_goes():
    async def scenario() -> tuple[list[service_pb2.TelemetryCommand], list[tuple[str, ...]], dict[str, Any]]:
        channels = TelemetryChannels()
        processor, synced = processor_with(channels)
        reported = asyncio.Event()

        async def requests() -> AsyncIterator[service_pb2.TelemetryCommand]:
            # a producer that lists no topic: its half messages say which it publishes
            yield service_pb2.TelemetryCommand(settings=definition_pb2.Settings(client_type=definition_pb2.PRODUCER))
            await asyncio.sleep(3600)

        async def on_command(channel: TelemetryChannel, command: service_pb2.TelemetryCommand) -> None:
            channel.settings = command.settings
            reported.set()

        stream = channels.serve("with-stream", requests(), on_command)
        first = asyncio.ensure_future(stream.__anext__())
        await reported.wait()
        await processor.publishes("with-stream", ["TxT"])
        await processor.publishes("no-stream", ["TxT"])
        check = definition_pb2.Message(topic=definition_pb2.Resource(name="TxT"), body=b"x")
        assert await processor.recover_orphaned_transaction(check, "tx-1")
        pushed = [await first]
        channels.close_all()
        pushed += [command async for command in stream]
        await processor.client_gone("with-stream")  # what the servicer does once the stream ended
        return pushed, synced, processor._publishers

    pushed, synced, publishers = asyncio.run(scenario())
    (command,) = pushed
    assert command.recover_orphaned_transaction_command.transaction_id == "tx-1"
    assert synced == [("TxT",), ()]  # heartbeated while it was connected, not after
    assert publishers == {}
