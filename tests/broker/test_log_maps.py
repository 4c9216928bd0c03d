"""The commit log's old pages leave the broker's maps, through the daemon: after 240 MiB of
produce the broker keeps about RELEASE_BEHIND (64 MiB) of the log mapped, not all it
dispatched; a consumer catching up from the first offset reads its messages intact, and the
old pages that read mapped again leave at the next release step.

Without the release every page the dispatch read stayed mapped, and in a full page cache each
new page of the log cost the kernel an unmap of an old one (TLB shoot-downs, rmap walks:
~0.13 us of the broker's CPU a 1 KiB message in tests.bench.topics' 2 GiB cgroup, issue 33).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from wharf.client import Producer
from wharf.store.dispatch.reput import RELEASE_BEHIND, RELEASE_STEP

from tests.broker.daemon_helpers import pull_bodies
from tests.harness import BrokerProcess, Daemons
from tests.store.helpers import mapped_bytes, until

pytestmark = pytest.mark.slow

MIB = 1 << 20
SEGMENT = 16 * MIB
BODY = 32 * 1024
BATCH = 16  # messages a send_batch: 512 KiB
TOPIC = "maps"
# The window the dispatch keeps, the step it releases by, a segment's worth of rounding and the
# tail the appends touch: what may stay mapped however much was written.
BOUND = RELEASE_BEHIND + 2 * RELEASE_STEP + SEGMENT


def _body(n: int) -> bytes:
    return random.Random(n).randbytes(BODY)  # incompressible: the SDK compresses large bodies


async def _produce(endpoint: str, first: int, count: int) -> None:
    async with Producer(endpoint) as producer:
        for start in range(first, first + count, 8 * BATCH):
            await asyncio.gather(
                *(
                    producer.send_batch(
                        TOPIC, [_body(n) for n in range(at, at + BATCH)], queue_id=0
                    )
                    for at in range(start, min(start + 8 * BATCH, first + count), BATCH)
                )
            )


def _log_mapped(broker: BrokerProcess) -> tuple[int, dict[str, int]]:
    """(bytes of all commit log segments the broker has mapped and resident, by segment)."""
    by_file = {
        path.name: mapped_bytes(str(path), broker.pid)
        for path in sorted((broker.store_dir / "commitlog").iterdir())
    }
    return sum(by_file.values()), by_file


def test_dispatched_log_pages_leave_the_maps_and_read_back_intact(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(
        tmp_path, settings={"mappedFileSizeCommitLog": SEGMENT, "defaultTopicQueueNums": 1}
    )
    written = 240 * MIB // BODY  # 7,680 messages in 15 segments
    asyncio.run(_produce(broker.endpoint, 0, written))
    # The dispatch runs behind the replies: wait for it to reach the end and release.
    asyncio.run(until(lambda: _log_mapped(broker)[0] <= BOUND, within_s=20))
    total, by_file = _log_mapped(broker)
    first = min(by_file)
    assert by_file[first] == 0 and total <= BOUND < written * BODY // 2, by_file

    # A consumer catching up from offset 0: the oldest segments are read (mapped) again.
    catch_up = 24 * MIB // BODY
    bodies = asyncio.run(pull_bodies(broker.endpoint, TOPIC, "maps-check", catch_up))
    assert bodies[:catch_up] == [_body(n) for n in range(catch_up)]
    assert _log_mapped(broker)[1][first] > 0

    # A release step of produce later they are out of the maps again.
    more = 2 * RELEASE_STEP // BODY
    asyncio.run(_produce(broker.endpoint, written, more))
    asyncio.run(until(lambda: _log_mapped(broker)[1][first] == 0, within_s=20))
    assert _log_mapped(broker)[0] <= BOUND
    assert broker.stop() == 0
