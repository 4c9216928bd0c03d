"""Message ids as RocketMQ makes them.

- Unique id (UNIQ_KEY, the "msgId" users see): made by the producer; the broker makes one when
  a request leaves it empty. Layout as MessageClientIDSetter: ip (4) + pid (2) + random (4) +
  ms since the start of the month (4) + counter (2) -> 32 upper-case hex chars.
- Offset message id: store host (8) + commit log offset (8), defined in ``wharf.store.codec.format``;
  here only a fast formatter for the hot send path (the host prefix computed once).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from datetime import UTC, datetime

from wharf.store.codec.format import encode_host


class UniqueIdGenerator:
    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            ip_bytes = socket.inet_aton(ip)
        except OSError:
            ip_bytes = bytes(4)
        prefix = ip_bytes + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4)
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count()
        now = datetime.now(UTC)
        month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        self._month_start_ms = int(month_start.timestamp() * 1000)
        self._last_ms = -1
        self._head = ""

    def next_id(self) -> str:
        # The ip/pid/random/time head changes once per millisecond: format it once per ms.
        now_ms = int(time.time() * 1000)
        if now_ms != self._last_ms:
            self._last_ms = now_ms
            elapsed = (now_ms - self._month_start_ms) & 0xFFFFFFFF
            self._head = f"{self._prefix}{elapsed:08X}"
        return f"{self._head}{next(self._counter) & 0xFFFF:04X}"


class OffsetMsgIdFormatter:
    """``format(offset)`` == ``store.format.create_offset_msg_id(store_host, offset)``."""

    def __init__(self, store_host: str) -> None:
        self.prefix = encode_host(store_host).hex().upper()

    def format(self, commit_log_offset: int) -> str:
        return f"{self.prefix}{commit_log_offset:016X}"
