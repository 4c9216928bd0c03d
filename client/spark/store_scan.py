"""The ``wharf-store`` source: decode a store directory's CommitLog offline, no daemon.

One Spark partition per CommitLog segment (files named by their 20-digit start offset under
``<store>/commitlog/``). Records are validated with ``wharf.store.codec.check_record`` and decoded
with ``wharf.store.codec.decode_record`` -- the store's own sans-IO codec, the only thing the
connector takes from ``store``.

Failure policy (``corruptRecords``):
- A record that fails its checks (bad magic, impossible sizes, torn, CRC mismatch, wrong
  PHYSICALOFFSET) is corruption. ``fail`` (default) stops the job with the offset and the
  reason. ``report`` logs a warning and emits a row with ``commitLogOffset`` and
  ``corruptReason`` set (metadata filled in when the header is still readable, ``body``
  null): ``df.where("corruptReason IS NOT NULL")`` lists count and offsets.
- When the damaged record's frame is intact (only its CRC or PHYSICALOFFSET is wrong) the
  scan continues at the next record; otherwise the record boundaries are lost and the rest of
  that segment is reported as one unreadable range.
- Zeros (TOTALSIZE 0) end the data (preallocated tail or preallocated next segments: not
  corruption) -- unless a later segment holds records: then they are lost data, reported.
"""

from __future__ import annotations

import logging
import mmap
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from wharf.client.spark.columns import ColumnBuffer
from wharf.client.spark.options import OptionError, check_topic_name
from wharf.store import codec as fmt
from wharf.store.errors import CorruptRecordError

log = logging.getLogger(__name__)

_ROWS_PER_BATCH = 8192
_HIDDEN_PROPERTIES = (fmt.PROPERTY_KEYS, fmt.PROPERTY_TAGS, fmt.PROPERTY_UNIQ_KEY)


class CorruptStoreError(RuntimeError):
    """``corruptRecords=fail`` met a damaged record."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    commit_log_dir: str
    corrupt_records: str  # "fail" | "report"
    check_crc: bool
    topics: tuple[str, ...]  # empty: every topic


@dataclass(frozen=True, slots=True)
class SegmentPartition(InputPartition):
    path: str
    start_offset: int  # commit log offset of the file's first byte
    data_follows: bool  # a later segment holds records (zeros here are then lost data)


def parse_scan_options(options: Mapping[str, str]) -> ScanOptions:
    path = options.get("path")
    if not path:
        raise OptionError('wharf-store needs a path: spark.read.format("wharf-store").load(dir)')
    commit_log_dir = os.path.join(path, "commitlog")
    if not os.path.isdir(commit_log_dir):
        if os.path.basename(os.path.normpath(path)) == "commitlog" and os.path.isdir(path):
            commit_log_dir = path
        else:
            raise OptionError(f"{path!r} is not a Wharf store directory (no commitlog/ inside)")
    mode = str(options.get("corruptRecords", "fail")).strip().lower()
    if mode not in ("fail", "report"):
        raise OptionError(f"option 'corruptRecords' must be 'fail' or 'report', got {mode!r}")
    check_crc = str(options.get("checkCrc", "true")).strip().lower() != "false"
    raw_topics = options.get("topic") or ""
    topics = tuple(check_topic_name(t.strip()) for t in raw_topics.split(",") if t.strip())
    return ScanOptions(commit_log_dir, mode, check_crc, topics)


def _starts_with_data(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(4)
    return len(head) == 4 and head != b"\0\0\0\0"


def list_segments(commit_log_dir: str) -> list[SegmentPartition]:
    """Segments in offset order. The broker preallocates the next segment(s), so trailing
    all-zero files are normal; reading 4 bytes of each tells where the data really ends."""
    starts = []
    for name in os.listdir(commit_log_dir):
        try:
            starts.append((fmt.parse_segment_file_name(name), os.path.join(commit_log_dir, name)))
        except ValueError:
            continue  # not a segment (e.g. a temporary file)
    starts.sort()
    has_data = [_starts_with_data(path) for _, path in starts]
    return [
        SegmentPartition(path, start, any(has_data[i + 1 :]))
        for i, (start, path) in enumerate(starts)
    ]


def _diagnose(buf: Any, pos: int, base: int, check_crc: bool) -> tuple[str, int | None, Any]:
    """Why the record at ``pos`` failed ``check_record``: (reason, size to skip when the frame
    is intact else None, the decoded message when the header is readable else None)."""
    remaining = len(buf) - pos
    if remaining < fmt.RECORD_HEADER_SIZE:
        return f"torn record: only {remaining} bytes left in the segment", None, None
    total = fmt.read_total_size(buf, pos)
    magic = fmt.MAGIC.unpack_from(buf, pos + fmt.OFFSET_MAGIC)[0]
    if magic not in (fmt.MESSAGE_MAGIC_CODE, fmt.MESSAGE_MAGIC_CODE_V2):
        return f"bad magic code 0x{magic:08X}", None, None
    if total <= 0 or total > remaining:
        return f"torn record: TOTALSIZE {total} with {remaining} bytes left", None, None
    try:
        message = fmt.decode_record(buf, pos, base)
    except CorruptRecordError as exc:
        return exc.reason, None, None
    physical = fmt.RECORD_HEADER.unpack_from(buf, pos)[6]
    if physical != base + pos:
        return f"PHYSICALOFFSET field says {physical}", total, message
    if check_crc and zlib.crc32(message.body) & 0x7FFFFFFF != message.body_crc:
        return "body CRC mismatch", total, message
    return "record failed its checks", None, message


class StoreScanReader(DataSourceReader):
    def __init__(self, opts: ScanOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema

    def partitions(self) -> list[InputPartition]:
        return list(list_segments(self._opts.commit_log_dir))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SegmentPartition)
        return scan_segment(self._opts, self._schema, partition)


def _emit(buffer: ColumnBuffer, message: Any, corrupt_reason: str | None = None) -> None:
    body = message.body
    if corrupt_reason is not None:
        body = None
    elif message.sys_flag & fmt.SYSFLAG_COMPRESSED:
        body = zlib.decompress(body)
    props = message.properties
    buffer.append(
        message.topic,
        message.queue_id,
        message.queue_offset,
        body,
        props.get(fmt.PROPERTY_TAGS, ""),
        message.keys,
        {k: v for k, v in props.items() if k not in _HIDDEN_PROPERTIES},
        props.get(fmt.PROPERTY_UNIQ_KEY, ""),
        message.born_timestamp,
        message.store_timestamp,
        message.commit_log_offset,
        corrupt_reason,
    )


def scan_segment(opts: ScanOptions, schema: StructType, seg: SegmentPartition) -> Iterator[Any]:
    buffer = ColumnBuffer(schema)
    problems: list[tuple[int, str]] = []
    wanted = set(opts.topics)

    def corrupt(offset: int, reason: str, message: Any = None) -> None:
        if opts.corrupt_records == "fail":
            raise CorruptStoreError(
                f"corrupt record at commit log offset {offset} in {seg.path}: {reason}. "
                "Use option corruptRecords=report to list damaged records and read the rest."
            )
        problems.append((offset, reason))
        if message is not None:
            _emit(buffer, message, reason)
        else:
            buffer.append(
                None, None, None, None, None, None, None, None, None, None, offset, reason
            )

    with open(seg.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            base = seg.start_offset
            pos = 0
            while pos < size:
                result = fmt.check_record(buf, pos, opts.check_crc, base + pos)
                if result > 0:
                    message = fmt.decode_record(buf, pos, base)
                    if not wanted or message.topic in wanted:
                        _emit(buffer, message)
                    pos += result
                elif result == fmt.RECORD_BLANK:
                    break
                elif result == fmt.RECORD_END:
                    if seg.data_follows:
                        corrupt(
                            base + pos,
                            f"zeros up to the end of the segment ({size - pos} bytes) while "
                            "later segments hold records: data lost",
                        )
                    break
                else:
                    reason, skip, message = _diagnose(buf, pos, base, opts.check_crc)
                    if skip is None:
                        reason += f"; bytes [{base + pos}, {base + size}) of the segment unreadable"
                    corrupt(base + pos, reason, message)
                    if skip is None:
                        break
                    pos += skip
                if buffer.rows >= _ROWS_PER_BATCH:
                    yield buffer.to_arrow()
    if buffer.rows:
        yield buffer.to_arrow()
    if problems:
        log.warning(
            "wharf-store: %d corrupt record(s) in %s at offsets %s",
            len(problems),
            seg.path,
            [offset for offset, _ in problems],
        )
