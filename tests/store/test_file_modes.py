"""What the store creates is private whatever the umask: directories 0700 and files 0600 (the
commit log holds every message body, past the ACL), 0750/0640 with ``storeGroupShared``. Run
under a umask of 000, which leaves every bit the code asks for: a file made without a mode of
its own would show 0666 here."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from wharf.store import paths
from wharf.store.message_store import MessageStore

from tests.store.helpers import msg, small_config
from tests.store.hooked import hooked_store

T0 = 1_800_000_000_000


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0o000)
    try:
        yield
    finally:
        os.umask(previous)
        paths.use_group_shared(False)  # process-wide: leave the default to the next test


async def _fill_and_stop(root: Path, **settings: object) -> None:
    """A store that made one of each of its files: segments, queues, index, checkpoint, pop
    journal, delay and config json, positions journal, abort marker (while it ran)."""
    store = hooked_store(small_config(root, **settings))  # a DELAY parks: delayOffset.json
    await store.start()
    try:
        for queue_id in range(2):
            await store.put("Modes", queue_id, [msg(f"body-{i}", keys=f"k{i}") for i in range(50)])
        await store.put("Delayed", 0, [msg("later", DELAY="3")])
        assert await store.wait_dispatched()
        await store.pop.pop("cg", "Modes", batch=2, invisible_ms=10_000, now=T0)
        assert (root / "abort").exists()
        _check_modes(root, 0o600 if not settings else 0o640, 0o700 if not settings else 0o750)
    finally:
        await store.shutdown()


def _check_modes(root: Path, file_mode: int, dir_mode: int) -> list[str]:
    seen = []
    assert stat.S_IMODE(root.stat().st_mode) == dir_mode
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames:
            mode = stat.S_IMODE((Path(directory) / name).stat().st_mode)
            assert mode == dir_mode, f"{directory}/{name}: {mode:o}"
        for name in filenames:
            path = Path(directory) / name
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == file_mode, f"{path}: {mode:o}"
            seen.append(str(path.relative_to(root)))
    return seen


@pytest.mark.usefixtures("open_umask")
async def test_private_by_default_whatever_the_umask(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "store"  # parents made too
    await _fill_and_stop(root)
    seen = _check_modes(root, 0o600, 0o700)
    for expected in ("checkpoint", "consumequeue/Modes/1/", "commitlog/", "index/", "pop/journal"):
        assert any(name.startswith(expected) for name in seen), (expected, sorted(seen))
    assert any(name.startswith("config/") and name.endswith(".json") for name in seen), seen
    assert stat.S_IMODE((tmp_path / "deep").stat().st_mode) == 0o700  # made by the store


@pytest.mark.usefixtures("open_umask")
async def test_group_shared_is_0750_and_0640(tmp_path: Path) -> None:
    root = tmp_path / "store"
    await _fill_and_stop(root, store_group_shared=True)
    assert _check_modes(root, 0o640, 0o750)


@pytest.mark.usefixtures("open_umask")
async def test_an_older_store_root_is_closed_at_start(tmp_path: Path) -> None:
    """A store made with 0755 (an older version, umask 022): the root is set to 0700 at the next
    start, so its older 0644 files are out of other accounts' reach."""
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    (root / "commitlog").mkdir(mode=0o755)
    store = MessageStore(small_config(root))
    await store.start()
    await store.shutdown()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


@pytest.mark.usefixtures("open_umask")
def test_the_brokers_metadata_files_too(tmp_path: Path) -> None:
    """The broker's topic, group and offset files (broker/meta) go through the store's atomic
    writer, and so does their journal."""
    from wharf.broker.meta.persist import write_text_atomic_blocking

    path = tmp_path / "config" / "topics.json"
    write_text_atomic_blocking(path, "{}")
    write_text_atomic_blocking(path, "{}")  # the second keeps a .bak
    for made in (path, paths.backup_of(path)):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600, made
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
