"""kill -9 in the middle of compaction, at each step of a pass's swap and at steps counted
across several passes: the restarted store reads the old or the new kept log, never a mix,
and every key's latest value is there (and no stray generation file is left)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wharf.store.message_store import MessageStore

from tests.store import compaction_child as child
from tests.store.helpers import run_child_and_kill_9_blocking

pytestmark = pytest.mark.slow  # five children of ~5 s each

CODE = "import sys; sys.argv = ['child', '{root}', '%s']; from tests.store.compaction_child import main; main()"


def latest_values(store: MessageStore) -> dict[str, int]:
    latest: dict[str, int] = {}
    offset, previous = 0, -1
    while offset < store.get_max_offset("c", 0):
        got = store.get_messages("c", 0, offset, 64)
        for m in got.messages:
            assert m.queue_offset > previous  # in order, each record once
            previous = m.queue_offset
            latest[m.properties["KEYS"]] = int(m.body)
        assert got.next_begin_offset > offset
        offset = got.next_begin_offset
    return latest


# Every step is also crashed in-process (test_compaction.py); here the swap's two sides and a
# step of the fourth pass (6 steps a pass).
@pytest.mark.parametrize("step", ["sync", "rename", "dir-sync", "remove-old", "any:23"])
def test_kill_9_mid_compaction_leaves_the_old_or_the_new_log(tmp_path: Path, step: str) -> None:
    root = tmp_path / "store"
    line = run_child_and_kill_9_blocking(CODE % step, root)
    assert line.startswith("at "), line

    async def check() -> None:
        store = MessageStore(child.config(root))
        await store.start()
        try:
            expected = {f"k{k}": child.RECORDS - child.KEYS + k for k in range(child.KEYS)}
            assert latest_values(store) == expected
            store.retention.follow(lambda: {"c": child.POLICY})
            for _ in range(8):  # the restarted store finishes the job
                await store.retention.run_once()
            assert latest_values(store) == expected
            kept = store.retention.covering("c", 0, 0)
            assert kept is not None and kept.state.records == child.KEYS
            names = {p.name for p in kept.directory.iterdir()}
            generation = f"{kept.state.generation:020d}"
            assert names == {"CURRENT", f"{generation}.log", f"{generation}.idx"}
        finally:
            await store.shutdown()

    asyncio.run(check())
