"""The proxy's send streams and broker channels to addresses no route names any more (a broker restarted on another
port, one gone) are closed by a periodic sweep once idle, without cutting a call short: before, one of each was kept
per broker address ever used (a broker restarted on a new port 10 times: 11 channels). In process, against real
in-process gRPC servers speaking the broker's send-stream frames."""

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.broker_channels import BrokerChannels
from proxy.broker_send_streams import BrokerSendStreams
from tests.cluster import wait_until
from tests.proxy.test_broker_send_streams import FakeBroker, answer_each, send, silent_until


def run(scenario: Callable[[BrokerChannels, BrokerSendStreams], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        channels = BrokerChannels()
        streams = BrokerSendStreams(channels)
        try:
            return await scenario(channels, streams)
        finally:
            await streams.close()
            await channels.close()

    return asyncio.run(main())


async def restarted_ten_times(streams: BrokerSendStreams) -> tuple[FakeBroker, list[str]]:
    """A broker that took sends, restarted on a new port ten times: the live one, and the old addresses."""
    old: list[str] = []
    for _ in range(10):
        broker = new_port(old)
        await send(streams, broker.addr, "t")
        broker.stop()
        old.append(broker.addr)
    live = new_port(old)
    await send(streams, live.addr, "t")
    return live, old


def new_port(used: list[str]) -> FakeBroker:
    """A broker on a port none of ``used`` had (the system may hand out a port just freed: one address, not two)."""
    while True:
        broker = FakeBroker(answer_each)
        if broker.addr not in used:
            return broker
        broker.stop()


def test_a_broker_restarted_on_new_ports_leaves_one_stream_and_one_channel():
    async def scenario(channels: BrokerChannels, streams: BrokerSendStreams) -> None:
        live, old = await restarted_ten_times(streams)
        try:
            assert len(channels._channels) == len(streams._streams) == 11
            closed = await streams.drop_unused({live.addr}, idle_s=0)
            assert sorted(closed) == sorted(old)
            assert set(streams._streams) == set(channels._channels) == set(channels._used) == {live.addr}
            assert (await send(streams, live.addr, "after")).remark == "after"  # its stream was left alone
            assert live.streams_opened == 1
        finally:
            live.stop()

    run(scenario)


def test_the_sweep_runs_on_its_own_and_keeps_what_the_routes_name():
    async def scenario(channels: BrokerChannels, streams: BrokerSendStreams) -> None:
        live, _ = await restarted_ten_times(streams)
        sweep = asyncio.create_task(streams.sweep_periodically(lambda: {live.addr}, interval_s=0.05, idle_s=0))
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(channels._channels) > 1 and loop.time() < deadline:
                await asyncio.sleep(0.05)
            assert set(channels._channels) == set(streams._streams) == {live.addr}
        finally:
            sweep.cancel()
            live.stop()

    run(scenario)


def test_a_stream_waiting_for_an_answer_and_a_channel_in_use_are_not_closed():
    release = threading.Event()
    silent = FakeBroker(silent_until(release))  # reads the sends and answers none for now
    quiet = FakeBroker(answer_each)

    async def scenario(channels: BrokerChannels, streams: BrokerSendStreams) -> None:
        waiting = send(streams, silent.addr, "t", timeout_s=30)
        await asyncio.to_thread(wait_until, lambda: silent.frames, 10, 0.02, "the send to reach the broker")
        await send(streams, quiet.addr, "t")
        channels.pop_service(quiet.addr)  # a receive there a moment ago
        # idle_s=0: the quiet address had nothing in flight, so it went; the silent one has a send waiting
        assert await streams.drop_unused(set(), idle_s=0.0) == [quiet.addr]
        assert silent.addr in streams._streams and silent.addr in channels._channels
        assert not waiting.done()
        await send(streams, quiet.addr, "again")  # reopened on demand
        assert await streams.drop_unused(set(), idle_s=60) == []  # used a moment ago: kept
        assert quiet.addr in channels._channels and quiet.addr in streams._streams
        waiting.cancel()  # not waited for any more

    try:
        run(scenario)
    finally:
        release.set()
        silent.stop()
        quiet.stop()
