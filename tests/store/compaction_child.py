"""The child of test_compaction_crash.py (not collected): a store whose compacted queue is
compacted in many passes (a key map of 50 keys for 200 keys), stopped by ``kill -9`` at a step
of a pass. Run as ``main(root, step)``: ``step`` is a swap step (``kept_log.STEPS``) or
``any:N``, the N-th step reached, whichever it is; it prints one line there and waits."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput
from wharf.store.retention.compactor import MAP_ENTRY_BYTES
from wharf.store.retention.policy import TopicPolicy

from tests.store.helpers import small_config

POLICY = TopicPolicy(compact=True, delete=False, segment_ms=1, min_cleanable_dirty_ratio=0.01)
KEYS = 200
RECORDS = 3000


def config(root: Path):  # type: ignore[no-untyped-def]
    return small_config(
        root, compaction_map_bytes=50 * MAP_ENTRY_BYTES, compaction_io_bytes_per_second=0
    )


def message(i: int) -> MessageInput:
    return MessageInput(str(i).encode(), {"KEYS": f"k{i % KEYS}"})


async def run(root: Path, step: str) -> None:
    store = MessageStore(config(root))
    await store.start()
    store.retention.follow(lambda: {"c": POLICY})
    for first in range(0, RECORDS, 100):
        await store.put("c", 0, [message(i) for i in range(first, first + 100)])
    assert await store.wait_dispatched()
    seen = 0

    def hook(at: str) -> None:
        nonlocal seen
        seen += 1
        if at == step or step == f"any:{seen}":
            print("at", at, seen, flush=True)
            time.sleep(120)

    assert store.retention.compaction is not None
    store.retention.compaction.fail = hook
    while True:
        await store.retention.run_once()
        await asyncio.sleep(0)


def main() -> None:
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2]))


if __name__ == "__main__":
    main()
