"""StoreCheckpoint: the 4 KiB ``checkpoint`` file (layout in ``wharf.store.codec.layout.CHECKPOINT``).

RocketMQ keeps three timestamps (commit log, consume queue, index: store time of the last
record known flushed). Wharf adds the commit log offsets they stand for (``physic_offset``,
``logics_offset``) and a CRC32 over the fields at byte 56, so abnormal recovery can start at an
exact offset and can tell a trustworthy file from a damaged one (``valid``). A file written by
RocketMQ (no CRC) still loads: its timestamps are used and the offsets are ignored.

Values are set only after the data they vouch for is flushed, so a stale checkpoint makes
recovery start earlier, never skip unflushed data. The file is relied on only as it is on
disk: ``flush_blocking`` fdatasyncs it, and fsyncs its directory after its first write (which
may create the file), so a power cut never loses a checkpoint the store already acted on; recovery
rewrites it when it had to lower an offset (store/recovery.py).
"""

from __future__ import annotations

import logging
import os
import zlib

from wharf.store.codec.layout import CHECKPOINT, CHECKPOINT_FILE_SIZE
from wharf.store.paths import create_file_blocking, fsync_dir_blocking

log = logging.getLogger(__name__)

_CRC_POS = CHECKPOINT.size  # 56: crc32 of bytes [0, 56) as a big-endian uint32
_CRC_SIZE = 4


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.physic_offset = 0
        self.logics_offset = 0
        self.existed = False  # the file was there at load
        self.valid = False  # ... and its CRC matched (offsets are trustworthy)
        self._name_synced = False  # its directory was fsynced after a write by this instance

    def load_blocking(self) -> None:
        """Read the file if present. A missing file leaves zeros (recovery then validates from
        the first segment it cannot skip); a bad CRC keeps the timestamps, drops the offsets."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(CHECKPOINT_FILE_SIZE)
        except FileNotFoundError:
            log.info("no checkpoint at %s: recovery cannot skip segments", self.path)
            return
        self.existed = True
        if len(raw) < _CRC_POS + _CRC_SIZE:
            log.warning("checkpoint %s is truncated (%d bytes): ignoring it", self.path, len(raw))
            return
        fields = CHECKPOINT.unpack_from(raw, 0)
        stored_crc = int.from_bytes(raw[_CRC_POS : _CRC_POS + _CRC_SIZE], "big")
        self.valid = stored_crc == zlib.crc32(raw[:_CRC_POS])
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = fields[:3]
        if self.valid:
            self.physic_offset, self.logics_offset = fields[5], fields[6]
        else:
            log.warning("checkpoint %s has no valid CRC: using its timestamps only", self.path)

    def to_bytes(self) -> bytes:
        body = CHECKPOINT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            0,  # masterFlushedOffset (RocketMQ 5)
            0,  # confirmPhyOffset (RocketMQ 5)
            self.physic_offset,
            self.logics_offset,
        )
        crc = zlib.crc32(body).to_bytes(_CRC_SIZE, "big")
        return body + crc + bytes(CHECKPOINT_FILE_SIZE - len(body) - _CRC_SIZE)

    def flush_blocking(self) -> None:
        """Write the whole 4 KiB page in place and fdatasync it. A 4 KiB aligned write is not
        torn on the filesystems we target; the CRC catches the case where it is."""
        data = self.to_bytes()
        fd = create_file_blocking(self.path, os.O_RDWR)
        try:
            os.pwrite(fd, data, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if not self._name_synced:
            # The file may be new (or left, not yet durable, by a crashed run): its name is
            # durable once its directory is synced. Once per instance, not per write.
            fsync_dir_blocking(os.path.dirname(os.path.abspath(self.path)))
            self._name_synced = True
        self.existed = self.valid = True

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's getMinTimestamp: the older of the commit log and queue timestamps, minus
        3 s of slack (clocks of the two flushes are not in step)."""
        low = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, low - 3000)

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint(physic_ts={self.physic_msg_timestamp}, "
            f"logics_ts={self.logics_msg_timestamp}, index_ts={self.index_msg_timestamp}, "
            f"physic_offset={self.physic_offset}, logics_offset={self.logics_offset}, "
            f"valid={self.valid})"
        )
