"""Client-side unique message ids (UNIQ_KEY), in RocketMQ's MessageClientIDSetter layout.

32 hex characters = 16 bytes: ip (4) + pid (2) + class-loader hash stand-in (4, random per
process) + milliseconds since the start of the current month (4) + counter (2). The first
10 bytes are fixed per process, so an id costs one struct.pack and one hex().
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import socket
import struct
import time

try:  # the compiled id formatter (store/fast/_record_encoder.c), when the install built it
    from wharf.store.fast._record_encoder import counter_ids as _counter_ids
except ImportError:  # no compiler at install time: the list comprehension below
    _counter_ids = None
if os.environ.get("WHARF_NO_SPEEDUPS"):  # measure or debug the pure-Python path
    _counter_ids = None


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


def _month_start_ms(now_ms: int) -> int:
    now = _dt.datetime.fromtimestamp(now_ms / 1000, tz=_dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqueIdGenerator:
    """Generates UNIQ_KEY ids; unique per process (counter) and across processes (ip, pid, random)."""

    def __init__(self, ip: bytes | None = None, pid: int | None = None) -> None:
        ip = ip if ip is not None else _local_ipv4()
        pid = os.getpid() if pid is None else pid
        self._prefix = (
            ip + struct.pack(">H", pid & 0xFFFF) + random.getrandbits(32).to_bytes(4, "big")
        )
        self._prefix_hex = self._prefix.hex().upper()
        self._counter = random.getrandbits(16)
        self._month_start = 0
        self._next_month = 0
        self._head_ms = -1  # the millisecond ``_head`` was formatted for
        self._head = ""

    def next_id(self) -> str:
        now = int(time.time() * 1000)
        if now != self._head_ms:
            # The first 28 hex chars only change once a millisecond: format them then, so
            # most ids cost one clock read and a 4-char format (~2x cheaper).
            if now >= self._next_month:
                self._roll_month(now)
            self._head_ms = now
            elapsed = (now - self._month_start) & 0xFFFFFFFF
            self._head = "%s%08X" % (self._prefix_hex, elapsed)  # noqa: UP031 (fastest)
        self._counter = counter = (self._counter + 1) & 0xFFFF
        return self._head + "%04X" % counter  # noqa: UP031 (fastest)

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids sharing one clock read (the batch path: ~4x cheaper per id)."""
        now = int(time.time() * 1000)
        if now >= self._next_month:
            self._roll_month(now)
        head = "%s%08X" % (self._prefix_hex, (now - self._month_start) & 0xFFFFFFFF)  # noqa: UP031
        start = self._counter + 1
        self._counter = (self._counter + count) & 0xFFFF
        if _counter_ids is not None:
            return _counter_ids(head, start, count)  # type: ignore[no-any-return]
        return ["%s%04X" % (head, (start + i) & 0xFFFF) for i in range(count)]  # noqa: UP031

    def _roll_month(self, now: int) -> None:
        self._month_start = _month_start_ms(now)
        start = _dt.datetime.fromtimestamp(self._month_start / 1000, tz=_dt.UTC)
        nxt = (start + _dt.timedelta(days=32)).replace(day=1)
        self._next_month = int(nxt.timestamp() * 1000)


_DEFAULT = UniqueIdGenerator()


def new_unique_id() -> str:
    """A fresh 32-hex-character UNIQ_KEY."""
    return _DEFAULT.next_id()


def new_unique_ids(count: int) -> list[str]:
    return _DEFAULT.next_ids(count)
