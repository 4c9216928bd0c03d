"""Keepalive pairing (wharf.keepalive): an SDK channel left idle for several keepalive periods
keeps its connection, the broker answers every ping without a strike (no GOAWAY
"too_many_pings"), and the channel still sends and reads afterwards.

The period is shortened to 1 s for the SDK and the broker alike (WHARF_GRPC_KEEPALIVE_MS; gRPC
clients never ping more often than once a second). The broker runs with gRPC's keepalive trace,
which logs each received ping with the connection's strike count.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from wharf import keepalive
from wharf.client import Producer, PullConsumer
from wharf.client.channel import open_channel
from wharf.client.consumer.pull import PullStatus
from wharf.client.message import MessageQueue
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

from tests.client.conftest import BROKER_SETTINGS
from tests.harness import BrokerProcess, Daemons

PERIOD_MS = 1_000
IDLE_PERIODS = 6
_RECEIVED_PING = re.compile(r"SERVER\[\w+\]: received ping \d+: .* ping_strikes=(\d+)")


# The servers' environment: the short period, and gRPC's trace of every received ping.
_SERVER_ENV = {
    keepalive.ENV: str(PERIOD_MS),
    "GRPC_VERBOSITY": "info",
    "GRPC_TRACE": "http_keepalive",
}


@pytest.fixture
def keepalive_broker(
    daemons: Daemons, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BrokerProcess]:
    """A broker and this process's SDK clients on a 1 s keepalive period."""
    monkeypatch.setenv(keepalive.ENV, str(PERIOD_MS))
    with daemons.broker(tmp_path / "broker", settings=BROKER_SETTINGS, env=_SERVER_ENV) as process:
        yield process


async def _record_changes(channel: grpc.aio.Channel, changes: list[str]) -> None:
    """Append every connectivity state the channel moves to (a GOAWAY moves it to IDLE)."""
    state = channel.get_state()
    while True:
        await channel.wait_for_state_change(state)
        state = channel.get_state()
        changes.append(state.name)


def _assert_no_goaway(server_log: str, client_log: str) -> None:
    """Pings did flow (the test proves nothing otherwise), each far enough from the one before
    to be no strike, and neither side saw a GOAWAY."""
    assert "too_many_pings" not in client_log and "GOAWAY" not in client_log, client_log
    strikes = [int(count) for count in _RECEIVED_PING.findall(server_log)]
    assert len(strikes) >= IDLE_PERIODS - 2, server_log[-4000:]
    assert set(strikes) == {0}, server_log[-4000:]
    assert "too_many_pings" not in server_log and "Too many pings" not in server_log


async def _read_one(consumer: PullConsumer, queue: MessageQueue, offset: int) -> bytes:
    result = await consumer.pull(queue, offset, max_messages=1)
    assert result.status == PullStatus.FOUND, result
    return result.messages[0].body


@pytest.mark.parametrize("streams", [False, True], ids=["no-call-open", "streams-open"])
async def test_idle_sdk_channel_outlives_keepalive_periods(
    keepalive_broker: BrokerProcess, name: str, streams: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """Unary sends and pulls: no call is open while the channel idles (pings without calls);
    the default send and pull streams: they stay open without data (pings during parked calls)."""
    endpoint = keepalive_broker.endpoint
    async with (
        Producer(endpoint, transport="stream" if streams else "unary") as producer,
        PullConsumer(endpoint, f"{name}-group", stream_pulls=streams) as consumer,
    ):
        first = await producer.send(name, b"before the idle time")
        queue = MessageQueue(name, first.queue_id)
        assert await _read_one(consumer, queue, first.queue_offset) == b"before the idle time"

        channels = [producer._channels[0], consumer._channel]
        assert all(isinstance(channel, grpc.aio.Channel) for channel in channels)
        assert [channel.get_state().name for channel in channels] == ["READY", "READY"]
        changes: list[str] = []
        watchers = [asyncio.create_task(_record_changes(c, changes)) for c in channels]
        try:
            await asyncio.sleep(IDLE_PERIODS * PERIOD_MS / 1000)
            after = await producer.send(name, b"after the idle time", queue_id=first.queue_id)
            assert await _read_one(consumer, queue, after.queue_offset) == b"after the idle time"
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    # The connections were never dropped (a GOAWAY turns a channel IDLE, then it reconnects).
    assert changes == [], f"the SDK's channels left READY: {changes}"
    _assert_no_goaway(keepalive_broker.log(), capfd.readouterr().err)


async def test_idle_route_watch_outlives_keepalive_periods(
    daemons: Daemons,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """An SDK channel to a NameServer holding a parked WatchRoutes stream (as the SDK's route
    watch does) keeps its connection and its stream, and answers a query afterwards."""
    monkeypatch.setenv(keepalive.ENV, str(PERIOD_MS))
    with daemons.namesrv(tmp_path / "namesrv", env=_SERVER_ENV) as namesrv:
        channel = open_channel(namesrv.endpoint)
        try:
            stub = namesrv_pb2_grpc.NameServiceStub(channel)
            await stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)
            assert channel.get_state().name == "READY"
            watch = stub.WatchRoutes(namesrv_pb2.WatchRoutesRequest(topics=["keepalive"]))
            changes: list[str] = []
            watcher = asyncio.create_task(_record_changes(channel, changes))
            try:
                await asyncio.sleep(IDLE_PERIODS * PERIOD_MS / 1000)
                await stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)
                assert not watch.done(), await watch.code()
            finally:
                watch.cancel()
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
        finally:
            await channel.close(None)
        assert changes == [], f"the SDK's channel left READY: {changes}"
        _assert_no_goaway(namesrv.log(), capfd.readouterr().err)
