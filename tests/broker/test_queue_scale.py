"""Queues past the open-file limit, through the daemon: a broker allowed 256 open files serves
2,000 queues (dispatch, reads, checkpoints), restarts cleanly and after kill -9, and when a
lowered limit leaves it no descriptor to map a queue file, the pull that needed one gets
RESOURCE_EXHAUSTED with what to do, everything else keeps working, one log line tells it, and
the broker serves that queue again once the limit is raised.

Before the queue file cache, 2,000 queues were ~4,000 descriptors: this broker's dispatch failed
with EMFILE every second and it could not restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import time
from pathlib import Path

import pytest
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.client import Producer, PullConsumer
from wharf.client.errors import ResourceExhaustedError
from wharf.client.route import MessageQueue

from tests.broker.remoting.test_server import Client as RemotingClient
from tests.broker.remoting.test_server import _pull_fields
from tests.harness import Daemons

pytestmark = pytest.mark.slow

OPEN_FILES = 256
TOPICS, QUEUES = 500, 4  # 2,000 queues, each its own file: ~8x the descriptors allowed
SETTINGS = {
    "defaultTopicQueueNums": QUEUES,
    "mappedFileSizeConsumeQueue": 20 * 1000,  # 20 KB files: the count matters, not the size
    "flushIntervalConsumeQueue": 200,
    "flushConsumeQueueThoroughInterval": 1000,  # every queue synced (and checkpointed) each second
}


def _closed_limit(pid: int) -> int:
    """An open-file limit under which ``pid`` can open nothing more: the lowest descriptor
    number that is free or held by a queue file (the file cache closes half its files and
    retries when an open fails: a number of one of them below the limit was free again, and
    1 run in ~6 of this test opened the file it should not have, when the limit was 20)."""
    held: dict[int, str] = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            held[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
    number = 0
    while number in held and "/consumequeue/" not in held[number]:
        number += 1
    return number


def _queue_files(pid: int) -> tuple[int, int]:
    """(descriptors, maps) the broker holds on consume queue files."""
    fds = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            fds += "/consumequeue/" in os.readlink(f"/proc/{pid}/fd/{name}")
    with open(f"/proc/{pid}/maps") as maps:
        return fds, sum("/consumequeue/" in line for line in maps)


async def _fill(endpoint: str) -> None:
    async with Producer(endpoint) as producer:
        for first in range(0, TOPICS, 50):
            await asyncio.gather(
                *(
                    producer.send(f"scale{t}", f"{t}/{q}".encode(), queue_id=q)
                    for t in range(first, first + 50)
                    for q in range(QUEUES)
                )
            )


async def _send_one(endpoint: str, topic: str, queue_id: int, body: bytes) -> None:
    async with Producer(endpoint) as producer:
        await producer.send(topic, body, queue_id=queue_id)


async def _read_all(endpoint: str) -> list[bytes]:
    async with PullConsumer(endpoint, "scale-check") as consumer:
        bodies: list[bytes] = []
        for first in range(0, TOPICS, 50):
            results = await asyncio.gather(
                *(
                    consumer.pull(MessageQueue(f"scale{t}", q), 0, max_wait_ms=3000)
                    for t in range(first, first + 50)
                    for q in range(QUEUES)
                )
            )
            bodies += [b"".join(m.body for m in r.messages) for r in results]
        return bodies


EXPECTED = [f"{t}/{q}".encode() for t in range(TOPICS) for q in range(QUEUES)]


def test_256_open_files_serve_2000_queues_and_restarts_after_stop_and_kill(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    broker = daemons.broker(tmp_path, settings=SETTINGS, open_files=OPEN_FILES, start=False)
    with broker:
        asyncio.run(_fill(broker.endpoint))
        assert asyncio.run(_read_all(broker.endpoint)) == EXPECTED
        fds, maps = _queue_files(broker.pid)
        # The cache's bound, plus the one the queue flush thread may hold for a sync (a file
        # or a directory); no queue file mapped.
        assert fds <= OPEN_FILES // 4 + 1 and maps == 0
        checkpoint = broker.store_dir / "checkpoint"
        before = checkpoint.stat().st_mtime_ns
        # One more message to dispatch: a thorough pass writes the checkpoint only when the
        # dispatch moved, and under CI's load the reads above can outlast the last such pass.
        asyncio.run(_send_one(broker.endpoint, "scale0", 0, b"+"))
        expected = [EXPECTED[0] + b"+", *EXPECTED[1:]]
        deadline = time.monotonic() + 15  # one thorough pass a second; a loaded CI box is slower
        while checkpoint.stat().st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert checkpoint.stat().st_mtime_ns > before  # queue flushes and checkpoints go on
        assert broker.stop() == 0
        loads = "loaded 2000 consume queues in"
        assert loads not in broker.log()
        broker.start()  # after a clean stop: the shutdown's snapshot
        assert broker.log().count(loads) == 1 and "(from the positions journal)" in broker.log()
        assert asyncio.run(_read_all(broker.endpoint)) == expected
        broker.kill()
        broker.start()  # after a process crash: snapshot + changes, re-dispatch from the last
        assert broker.log().count("(from the positions journal)") == 2
        assert asyncio.run(_read_all(broker.endpoint)) == expected
        broker.kill()
        # A machine crash (the abort marker of another boot): the page cache is not trusted,
        # every queue's files are read within the same descriptor limit.
        (broker.store_dir / "abort").write_text("another-boot\n")
        broker.start()
        assert f"{loads}" in broker.log() and "(reading their files)" in broker.log()
        assert asyncio.run(_read_all(broker.endpoint)) == expected
        log = broker.log()
    assert "Too many open files" not in log and "met a limit" not in log


async def _pull_one(endpoint: str, topic: str, queue_id: int) -> list[bytes]:
    async with PullConsumer(endpoint, "scale-check") as consumer:
        result = await consumer.pull(MessageQueue(topic, queue_id), 0, max_wait_ms=0)
        return [m.body for m in result.messages]


def test_no_descriptor_left_a_pull_gets_resource_exhausted_and_the_rest_serves(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    broker = daemons.broker(
        tmp_path,
        settings=SETTINGS,
        open_files=OPEN_FILES,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
        start=False,
    )
    with broker:
        asyncio.run(_fill(broker.endpoint))
        endpoint = broker.endpoint

        async def exhausted() -> None:
            host, _, port = broker.remoting_endpoint.rpartition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            remoting = RemotingClient(reader, writer)  # a 4.x client, connected before
            async with (
                PullConsumer(endpoint, "scale-check") as consumer,
                Producer(endpoint) as producer,
            ):
                # Mapped most recently by the fill: still in the cache. (A long poll: the fill's
                # last send is acknowledged before it is dispatched.)
                hot = MessageQueue(f"scale{TOPICS - 1}", QUEUES - 1)
                first = await consumer.pull(hot, 0, max_wait_ms=3000)
                assert [m.body for m in first.messages] == [EXPECTED[-1]]
                # No descriptor number below the limit is free, nor freed by the cache closing
                # its files: nothing new can be opened.
                limit = _closed_limit(broker.pid)
                resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (limit, OPEN_FILES))
                for topic in ("scale0", "scale1", "scale2"):
                    with pytest.raises(ResourceExhaustedError, match="open-file limit"):
                        await consumer.pull(MessageQueue(topic, 0), 0)
                # The same over RocketMQ 4.x remoting: SYSTEM_BUSY (2) saying what to do.
                busy = await remoting.call(
                    RequestCode.PULL_MESSAGE, _pull_fields("scale3", 0, 0, 0)
                )
                assert busy.code == ResponseCode.SYSTEM_BUSY and "open-file limit" in busy.remark
                # What needs no new file still works: a send to an existing queue, and a read of
                # a file the cache still holds.
                sent = await producer.send(hot.topic, b"during", queue_id=hot.queue_id)
                assert sent.queue_offset == 1
                assert next(m.body for m in (await consumer.pull(hot, 0)).messages) == EXPECTED[-1]
                # A message to an unmapped queue waits for dispatch, which resumes with the limit.
                await producer.send("scale0", b"later", queue_id=0)
                resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    bodies = [
                        m.body
                        for m in (
                            await consumer.pull(MessageQueue("scale0", 0), 0, max_wait_ms=500)
                        ).messages
                    ]
                    if len(bodies) == 2 or asyncio.get_running_loop().time() > deadline:
                        break
                assert bodies == [b"0/0", b"later"]
                pulled = await remoting.call(
                    RequestCode.PULL_MESSAGE, _pull_fields("scale3", 0, 0, 0)
                )
                assert pulled.code == ResponseCode.SUCCESS
            writer.close()

        asyncio.run(exhausted())
        log = broker.log()
        assert log.count("met a limit") == 1  # one line for the episode, not one per pull
        assert broker.stop() == 0
        broker.start()
        assert asyncio.run(_pull_one(broker.endpoint, "scale0", 0)) == [b"0/0", b"later"]
    assert os.path.exists(tmp_path / "store" / "consumequeue" / "scale0")
