"""Crash test: a subprocess appends with SYNC_FLUSH (V1 and V2 records: a short and a
249-character topic) and records every ACKNOWLEDGED record in a side file; it is SIGKILLed mid-load. After reopening and recovering, every acknowledged
message must be readable byte for byte, and nothing after a torn record may be served.

Run as ``python -m tests.store.test_crash STORE_DIR ACK_FILE`` for the writer side.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from wharf.store import codec as fmt
from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import MessageInput

REPO_ROOT = Path(__file__).resolve().parents[2]
SEGMENT = 64 * 1024
WRITERS = 8


def crash_config(store_dir: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=store_dir,
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type=SYNC_FLUSH,
        flush_interval_commit_log=50,  # checkpoint persisted often: recovery starts late
    )


def topic_of(writer: int) -> str:
    """Odd writers write a 249-character topic: the log mixes V1 and V2 records."""
    return "Crash" if writer % 2 == 0 else "C" * 249


def expected_body(writer: int, seq: int, index: int) -> bytes:
    return (b"w%d-s%d-i%d|" % (writer, seq, index)) * (10 + (seq * 7 + index) % 40)


# --- the writer (subprocess) ------------------------------------------------------------------


async def _writer_main(store_dir: str, ack_path: str) -> None:
    checkpoint = StoreCheckpoint(os.path.join(store_dir, "checkpoint"))
    checkpoint.load_blocking()
    log = CommitLog(crash_config(store_dir), checkpoint=checkpoint)
    log.load_blocking()
    log.recover_blocking(abnormal=True, checkpoint=checkpoint)
    log.start()
    # O_APPEND writes reach the page cache at once: they survive SIGKILL of this process.
    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    queue_offsets = [0] * WRITERS

    async def writer(w: int) -> None:
        seq = 0
        while True:
            count = 1 + seq % 4
            messages = [
                MessageInput(expected_body(w, seq, i), {"KEYS": f"w{w}s{seq}"})
                for i in range(count)
            ]
            result = log.append(topic_of(w), w, queue_offsets[w], messages)
            queue_offsets[w] += count
            if await log.wait_flushed(result.end_offset):
                lines = "".join(
                    f"{o} {s} {w} {seq} {i}\n"
                    for i, (o, s) in enumerate(zip(result.offsets, result.sizes, strict=True))
                )
                os.write(ack_fd, lines.encode())
            seq += 1

    await asyncio.gather(*(writer(w) for w in range(WRITERS)))


# --- the test ---------------------------------------------------------------------------------


def scan_data_end(commitlog_dir: Path) -> int:
    """Read-only oracle: the offset after the last whole record (segments in order)."""
    end = 0
    for name in sorted(os.listdir(commitlog_dir)):
        base = fmt.parse_segment_file_name(name)
        data = (commitlog_dir / name).read_bytes()
        pos = 0
        while (size := fmt.check_record(data, pos, True, base + pos)) > 0:
            pos += size
        if size != fmt.RECORD_BLANK:
            return base + pos
        end = base + len(data)
    return end


def read_acks(ack_path: Path) -> list[tuple[int, int, int, int, int]]:
    acks = []
    for line in ack_path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:  # a line cut by the kill is not an acknowledgement we saw whole
            acks.append(tuple(int(p) for p in parts))
    return acks


def test_acknowledged_messages_survive_sigkill_and_torn_tail_is_not_served(tmp_path):
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    ack_path = tmp_path / "acks.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.test_crash", str(store_dir), str(ack_path)],
        cwd=REPO_ROOT,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ack_path.exists() and ack_path.stat().st_size > 60_000 * 2:  # spans many segments
                break
            if proc.poll() is not None:
                raise AssertionError(f"writer exited early: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        else:
            raise AssertionError("writer acknowledged too little in 30 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    acks = read_acks(ack_path)
    assert len(acks) > 500

    # Simulate a torn write at the end of the data: a record header without its body (a V2
    # one: tests/store/test_commit_log_recovery.py tears V1 records).
    data_end = scan_data_end(store_dir / "commitlog")
    tail_room = SEGMENT - data_end % SEGMENT
    if tail_room > fmt.RECORD_HEADER_SIZE + 8:
        torn = fmt.RECORD_HEADER.pack(
            500,
            fmt.MESSAGE_MAGIC_CODE_V2,
            1,
            0,
            0,
            0,
            data_end,
            0,
            0,
            bytes(8),
            0,
            bytes(8),
            0,
            0,
            400,
        )
        segment = store_dir / "commitlog" / fmt.segment_file_name(data_end - data_end % SEGMENT)
        with open(segment, "r+b") as f:
            f.seek(data_end % SEGMENT)
            f.write(torn)

    checkpoint = StoreCheckpoint(str(store_dir / "checkpoint"))
    checkpoint.load_blocking()
    assert checkpoint.valid and 0 < checkpoint.physic_offset <= data_end
    log = CommitLog(crash_config(str(store_dir)), checkpoint=checkpoint)
    log.load_blocking()
    end = log.recover_blocking(abnormal=True, checkpoint=checkpoint)
    try:
        assert end == data_end  # the torn record is cut off, nothing before it is lost
        assert log.read_bytes(end, 8) is None  # nothing after the valid end is served
        assert end >= max(offset + size for offset, size, *_ in acks)
        for offset, size, w, seq, index in acks:
            message = log.read_message(offset, size)
            assert message is not None, f"acknowledged record at {offset} lost"
            assert message.body == expected_body(w, seq, index)
            assert message.topic == topic_of(w) and message.queue_id == w
            assert message.keys == [f"w{w}s{seq}"]
        # every record up to the end is whole (CRC checked), and then the data ends
        valid = log.read_messages(log.min_offset, 1 << 30, 1 << 40)
        last = valid[-1]
        assert last.commit_log_offset + last.store_size == end or end % SEGMENT == 0
        magics = set()
        for m in valid:
            raw = log.read_bytes(m.commit_log_offset, m.store_size)
            assert fmt.check_record(raw, 0, True, m.commit_log_offset) == m.store_size
            magics.add(fmt.MAGIC.unpack_from(raw, fmt.OFFSET_MAGIC)[0])
        assert magics == {fmt.MESSAGE_MAGIC_CODE, fmt.MESSAGE_MAGIC_CODE_V2}
    finally:
        log.close()


if __name__ == "__main__":
    asyncio.run(_writer_main(sys.argv[1], sys.argv[2]))
