"""Shared helpers for the store tests (not collected: no test_ prefix)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from wharf.store.codec.send_records import encode_record, topic_tail
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


def run_child_and_kill_9_blocking(code: str, root: Path) -> str:
    """Run ``code`` (a template of ``{repo}`` and ``{root}``) in a child Python, return its first
    line of output (stripped) once it prints one, then SIGKILL it: a process crash at a
    moment the child chose."""
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen(
        [sys.executable, "-c", code.format(repo=repo, root=str(root))],
        stdout=subprocess.PIPE,
        cwd=repo,
        text=True,
    )
    try:
        assert child.stdout is not None
        return child.stdout.readline().strip()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()


def records(topic: str, *bodies: str) -> bytes:
    """Producer-encoded records of ``bodies`` for ``topic`` (one property k=v each)."""
    tail = topic_tail(topic)
    return b"".join(encode_record(tail, body.encode(), b"k\x01v\x02") for body in bodies)


def mapped_bytes(path: str, pid: int | str = "self") -> int:
    """Bytes of ``path`` process ``pid`` has mapped and resident (its maps' ``Rss`` in
    /proc/<pid>/smaps, found by inode: a segment is mapped under its creation name): what page
    reclaim would have to unmap."""
    inode = str(os.stat(path).st_ino)
    total = 0
    inside = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
                inside = len(fields) > 4 and fields[4] == inode
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def unwritten_extents(path: str) -> int:
    """Extents ext4 still marks unwritten (``filefrag -v``): what a zero fill must leave none of."""
    out = subprocess.run(["filefrag", "-v", path], capture_output=True, text=True, check=True)
    return sum("unwritten" in line for line in out.stdout.splitlines())


def has_unwritten_extents(path: str | Path) -> bool:
    """Whether the file system of ``path`` keeps fallocated space as unwritten extents (ext4,
    xfs: where a zero fill matters). ``stat -f`` names ext4 "ext2/ext3": ask ``df``."""
    out = subprocess.run(
        ["df", "--output=fstype", str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[-1] in ("ext4", "xfs") and shutil.which("filefrag") is not None
