"""Zero-filled segments through the daemon (``zeroFillAheadMbps``, SYNC_FLUSH): a log that
rolls slowly gets the segment it asks for zero-filled before use, one that has not rolled twice
yet gets plain fallocated ones; messages written through both kinds read back intact, also
after kill -9 and a restart.

1 MiB segments at 1 MB/s: a fill takes ~1 s, so a roll 4.5 s after the previous one (at least
FILL_MARGIN fills) asks for a filled segment.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from wharf.client import Producer
from wharf.store.codec.layout import segment_file_name

from tests.broker.daemon_helpers import pull_bodies
from tests.harness import BrokerProcess, Daemons
from tests.store.helpers import has_unwritten_extents, unwritten_extents

pytestmark = pytest.mark.slow

MIB = 1 << 20
BODY = 32 * 1024  # ~31 records a segment
TOPIC = "fill"


def _body(n: int) -> bytes:
    return random.Random(n).randbytes(BODY)  # incompressible: the SDK compresses large bodies


async def _produce(endpoint: str, first: int, count: int) -> None:
    async with Producer(endpoint) as producer:
        for n in range(first, first + count):
            await producer.send(TOPIC, _body(n), queue_id=0)


def _segment(broker: BrokerProcess, index: int) -> Path:
    return broker.store_dir / "commitlog" / segment_file_name(index * MIB)


def test_a_slowly_rolling_log_writes_into_zero_filled_segments_and_keeps_them_after_kill_9(
    daemons: Daemons, tmp_path: Path
) -> None:
    broker = daemons.broker(
        tmp_path,
        settings={
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": MIB,
            "zeroFillAheadMbps": 1,
            "maxMessageSize": 256 * 1024,  # below the segment size
            "defaultTopicQueueNums": 1,
        },
    )
    asyncio.run(_produce(broker.endpoint, 0, 40))  # the first roll: segment 1
    time.sleep(4.5)
    asyncio.run(_produce(broker.endpoint, 40, 30))  # the second, 4.5 s later: segment 2
    assert _segment(broker, 2).exists()
    # Asked for at the second roll: segment 3 was asked for at the first (fallocated only),
    # segment 4 is filled, ~1 s at 1 MB/s.
    deadline = time.monotonic() + 15
    while not _segment(broker, 4).exists():
        assert time.monotonic() < deadline, "segment 4 was not made ahead"
        time.sleep(0.1)
    if has_unwritten_extents(tmp_path):
        assert unwritten_extents(str(_segment(broker, 3))) > 0
        assert unwritten_extents(str(_segment(broker, 4))) == 0
    total = 70 + 100  # on through segments 3, 4 and 5
    asyncio.run(_produce(broker.endpoint, 70, 100))
    assert _segment(broker, 5).exists()
    expected = [_body(n) for n in range(total)]
    assert asyncio.run(pull_bodies(broker.endpoint, TOPIC, "fill-check", total)) == expected
    broker.kill()
    broker.start()
    assert asyncio.run(pull_bodies(broker.endpoint, TOPIC, "fill-check", total)) == expected
