"""Write a small CommitLog the way the broker lays it out, with the store's own codec
(segments named by start offset, blank marker at the tail, zero-filled last segment)."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from pathlib import Path

from wharf.store import codec as fmt
from wharf.store.model import MessageInput


@dataclass
class Written:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    tags: str
    keys: list[str]
    unique_id: str


def write_commit_log(
    store_dir: Path,
    messages: list[tuple[str, int, bytes, str, list[str]]],
    segment_size: int = 4096,
    compress_every: int = 0,
) -> list[Written]:
    """``messages``: (topic, queue id, body, tags, keys). Returns what landed where."""
    commit_log = store_dir / "commitlog"
    commit_log.mkdir(parents=True)
    queue_next: dict[tuple[str, int], int] = {}
    written: list[Written] = []
    segment = bytearray(segment_size)
    seg_start = 0
    pos = 0
    for i, (topic, queue_id, body, tags, keys) in enumerate(messages):
        queue_offset = queue_next.get((topic, queue_id), 0)
        unique_id = f"U{i:06d}"
        props = {fmt.PROPERTY_UNIQ_KEY: unique_id, "n": str(i)}
        if tags:
            props[fmt.PROPERTY_TAGS] = tags
        if keys:
            props[fmt.PROPERTY_KEYS] = " ".join(keys)
        compressed = bool(compress_every) and i % compress_every == 0
        stored = zlib.compress(body) if compressed else body
        msg = MessageInput(
            body=stored,
            properties=props,
            sys_flag=fmt.SYSFLAG_COMPRESSED if compressed else 0,
            born_timestamp=1_700_000_000_000 + i,
        )

        encode = functools.partial(
            fmt.encode_batch,
            topic,
            queue_id,
            queue_offset,
            [msg],
            store_timestamp=1_700_000_000_500 + i,
            store_host="127.0.0.1:8081",
            max_message_size=4 * 1024 * 1024,
        )
        batch = encode(start_offset=seg_start + pos)
        if pos + len(batch.data) + fmt.END_FILE_MIN_BLANK_LENGTH > segment_size:
            segment[pos : pos + 8] = fmt.encode_blank(segment_size - pos)
            (commit_log / fmt.segment_file_name(seg_start)).write_bytes(bytes(segment))
            seg_start += segment_size
            segment = bytearray(segment_size)
            pos = 0
            batch = encode(start_offset=seg_start)
        segment[pos : pos + len(batch.data)] = batch.data
        written.append(
            Written(topic, queue_id, queue_offset, seg_start + pos, body, tags, keys, unique_id)
        )
        pos += len(batch.data)
        queue_next[(topic, queue_id)] = queue_offset + 1
    (commit_log / fmt.segment_file_name(seg_start)).write_bytes(bytes(segment))
    return written


def flip_body_byte(store_dir: Path, commit_log_offset: int) -> None:
    """Damage one body byte of the record at ``commit_log_offset`` (its CRC no longer matches)."""
    starts = sorted(int(p.name) for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    seg_start = max(s for s in starts if s <= commit_log_offset)
    path = store_dir / "commitlog" / fmt.segment_file_name(seg_start)
    data = bytearray(path.read_bytes())
    at = commit_log_offset - seg_start + fmt.RECORD_HEADER_SIZE
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
