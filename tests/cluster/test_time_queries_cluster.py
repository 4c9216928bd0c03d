"""Queries by time over a cluster of two broker groups: ``consume --from TIME`` and ``query
--begin-ms/--end-ms`` through ``--namesrv`` ask every group (SearchOffset on each (broker,
queue), QueryMessage on each group), as does the SDK's ``PullConsumer.offset_for_time``."""

from __future__ import annotations

import asyncio
import time

import pytest
from wharf.client import Producer
from wharf.client.consumer.pull import PullConsumer

from tests.cluster.test_namesrv import cli, cli_lines, route, wait_for

pytestmark = pytest.mark.slow


async def test_time_queries_fan_out_over_both_groups(cluster) -> None:  # type: ignore[no-untyped-def]
    names, _brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    cli(ns, "topic", "create", "events", "--cluster", "C", "--queues", "2")
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, "events") == {"broker-a": 2, "broker-b": 2}, 5, "")

    async def send(prefix: str) -> list[str]:
        async with Producer(namesrv=ns) as producer:
            results = [
                await producer.send("events", f"{prefix}-{i}".encode(), keys=["k"])
                for i in range(12)
            ]
        return sorted({r.offset_msg_id[:16] for r in results})  # the stores that took them

    await send("early")
    await asyncio.sleep(0.2)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.2)
    stores = await send("late")
    assert len(stores) == 2  # the later messages are on both groups

    consumed = await asyncio.to_thread(cli_lines, ns, "consume", "events", "--from", str(middle))
    assert sorted(m["body"] for m in consumed) == sorted(f"late-{i}" for i in range(12))
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle / 1000)) + f".{middle % 1000:03d}"
    by_iso = await asyncio.to_thread(cli_lines, ns, "consume", "events", "--from", iso)
    assert sorted(m["body"] for m in by_iso) == sorted(f"late-{i}" for i in range(12))

    def query(*window: str) -> list[str]:
        found = cli(ns, "query", "--topic", "events", "--key", "k", "--max", "64", *window)
        return sorted(m["body"] for m in found)

    # The key index is built by dispatch.
    await asyncio.to_thread(wait_for, lambda: len(query()) == 24, 10, "24 messages indexed")
    assert await asyncio.to_thread(query, "--begin-ms", str(middle)) == sorted(
        f"late-{i}" for i in range(12)
    )
    assert await asyncio.to_thread(query, "--end-ms", str(middle)) == sorted(
        f"early-{i}" for i in range(12)
    )

    async with PullConsumer(namesrv=ns, group="g-time") as consumer:
        queues = await consumer.queues("events")
        assert len({q.broker_name for q in queues}) == 2
        late = []
        for queue in queues:
            start = await consumer.offset_for_time(queue, middle)
            result = await consumer.pull(queue, start, max_messages=64)
            late += [m.body.decode() for m in result.messages]
    assert sorted(late) == sorted(f"late-{i}" for i in range(12))
