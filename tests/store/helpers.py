"""Shared helpers for the store tests (not collected: no test_ prefix)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from wharf.store.config import StoreConfig
from wharf.store.model import MessageInput

SMALL_SIZES = {
    "mapped_file_size_commit_log": 16 * 1024,
    "mapped_file_size_consume_queue": 20 * 16,
    "max_hash_slot_num": 32,
    "max_index_num": 64,
    "message_delay_level": "1s 2s",
    "flush_interval_consume_queue": 50,
    "flush_interval_commit_log": 50,
}


def small_config(root: Path, **overrides: object) -> StoreConfig:
    settings = {**SMALL_SIZES, "store_path_root_dir": str(root), **overrides}
    return StoreConfig(**settings)  # type: ignore[arg-type]


def msg(
    body: bytes | str, tags: str = "", keys: str = "", uniq: str = "", **props: str
) -> MessageInput:
    properties = dict(props)
    if tags:
        properties["TAGS"] = tags
    if keys:
        properties["KEYS"] = keys
    if uniq:
        properties["UNIQ_KEY"] = uniq
    return MessageInput(body.encode() if isinstance(body, str) else body, properties)


async def until(check: Callable[[], bool], within_s: float = 10.0) -> None:
    """Wait until ``check()`` is true, polling every 10 ms; fail after ``within_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
