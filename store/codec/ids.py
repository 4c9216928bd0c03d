"""Message ids as RocketMQ makes them: the ONE implementation of each (broker, client and the
compiled twins call these; sans-IO, numpy-free).

Offset message id (``layout.OFFSET_MSG_ID``, RocketMQ's MessageDecoder.createMessageId):
STOREHOST (8 bytes: ip 4 + port 4) + commit log offset (8) -> 32 upper-case hex chars. The
host part is the same for every record of a broker, so it is hexed once (``offset_msg_id_prefix``)
and an id costs one ``%016X`` format. ``wharf.store.fast._record_encoder.send_results`` is the
compiled twin of ``prefix + "%016X" % offset`` for a whole send reply (differential test:
tests/client/test_fast_record_encoder.py).

Unique id (UNIQ_KEY, the "msgId" users see), RocketMQ's MessageClientIDSetter layout: ip (4) +
pid (2) + random (4, the class-loader hash stand-in) + ms since the start of the current month
(4) + counter (2) -> 32 upper-case hex chars. Made by the producer; the broker makes one when a
request leaves it empty. As MessageClientIDSetter, the month start is recomputed when the clock
passes the next month's start (``setStartTime``), and a clock stepped back by less than 1000 s
before the month start (NTP) gives a time part of 0. Months are UTC months (RocketMQ uses the
JVM's time zone; the time part is only there to make ids unique and roughly sortable).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import random
import socket
import time
from collections.abc import Callable

from wharf.store.codec.hosts import encode_host
from wharf.store.codec.layout import OFFSET_MSG_ID, OFFSET_MSG_ID_HEX_LENGTH
from wharf.store.errors import InvalidMessageError

# ---------------------------------------------------------------------------- offset message id


@functools.lru_cache(maxsize=4096)
def offset_msg_id_prefix(store_host: str) -> str:
    """The 16 hex chars of ``store_host`` (``"ipv4:port"``) that open its offset message ids;
    InvalidMessageError if it is not ``ipv4:port``."""
    return encode_host(store_host).hex().upper()


@functools.lru_cache(maxsize=64)
def host_bytes_prefix(raw: bytes) -> str:
    """The same prefix from a record's 8 STOREHOST bytes (the client's raw-record path)."""
    return raw.hex().upper()


def format_offset_msg_id(prefix: str, commit_log_offset: int) -> str:
    """``prefix`` (from ``offset_msg_id_prefix``) + the offset as 16 hex digits."""
    return "%s%016X" % (prefix, commit_log_offset)  # noqa: UP031 (fastest)


def create_offset_msg_id(store_host: str, offset: int) -> str:
    """The broker's offset message id: 32 upper-case hex chars = ip(4) + port(4) + offset(8)."""
    if offset < 0:
        raise ValueError(f"negative commit log offset {offset}")
    return format_offset_msg_id(offset_msg_id_prefix(store_host), offset)


class OffsetMsgIdFormatter:
    """``format(offset)`` == ``create_offset_msg_id(store_host, offset)``, the host part hexed
    once (the broker's send and pull paths format one id per message)."""

    __slots__ = ("prefix",)

    def __init__(self, store_host: str) -> None:
        self.prefix = offset_msg_id_prefix(store_host)

    def format(self, commit_log_offset: int) -> str:
        return "%s%016X" % (self.prefix, commit_log_offset)  # noqa: UP031 (fastest)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of ``create_offset_msg_id`` -> (``"ip:port"``, commit log offset)."""
    if len(msg_id) != OFFSET_MSG_ID_HEX_LENGTH:
        raise InvalidMessageError(
            f"offset message id must be {OFFSET_MSG_ID_HEX_LENGTH} hex chars, got {len(msg_id)}"
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise InvalidMessageError(f"offset message id {msg_id!r} is not hex") from None
    ip, port, offset = OFFSET_MSG_ID.unpack(raw)
    if offset < 0 or port < 0:
        raise InvalidMessageError(f"offset message id {msg_id!r} holds a negative offset/port")
    return f"{socket.inet_ntoa(ip)}:{port}", offset


# ------------------------------------------------------------------------------------ unique id

# NTP may step the clock back a little across a month start: RocketMQ writes 0 then.
_CLOCK_STEP_BACK_MS = 1_000_000


def month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """(start of the UTC month holding ``now_ms``, start of the next one), in epoch ms."""
    now = _dt.datetime.fromtimestamp(now_ms / 1000, tz=_dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + _dt.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


def ipv4_bytes(ip: str) -> bytes:
    """A dotted ipv4 address -> 4 bytes; zeros for anything else (an id must still be made)."""
    try:
        return socket.inet_aton(ip)
    except OSError:
        return bytes(4)


def _counter_ids_python(head: str, start: int, count: int) -> list[str]:
    return ["%s%04X" % (head, (start + i) & 0xFFFF) for i in range(count)]  # noqa: UP031


class UniqueIdGenerator:
    """Generates UNIQ_KEY ids; unique per process (counter) and across processes (ip, pid,
    random). ``ip`` is 4 bytes or a dotted ipv4 address; ``clock`` returns epoch seconds
    (``time.time`` by default, looked up at each call so a test may patch it); ``counter_ids``
    formats a batch's counters (the compiled twin ``_record_encoder.counter_ids`` when the
    caller has it: the codec cannot import ``wharf.store.fast``, a layer above it)."""

    def __init__(
        self,
        ip: bytes | str = "127.0.0.1",
        pid: int | None = None,
        *,
        clock: Callable[[], float] | None = None,
        counter_ids: Callable[[str, int, int], list[str]] | None = None,
    ) -> None:
        ip = ipv4_bytes(ip) if isinstance(ip, str) else ip
        pid = os.getpid() if pid is None else pid
        prefix = ip + (pid & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
        self._prefix_hex = prefix.hex().upper()
        self._clock = clock
        self._counter_ids = counter_ids or _counter_ids_python
        self._counter = random.getrandbits(16)
        self._month_start = 0
        self._next_month = 0  # the first id computes the month (``now >= 0``)
        self._head_ms = -1  # the millisecond ``_head`` was formatted for
        self._head = ""

    def _head_for(self, now: int) -> str:
        """The first 28 hex chars: prefix + ms since the month start (rolled over as needed)."""
        if now >= self._next_month:
            self._month_start, self._next_month = month_bounds_ms(now)
        elapsed = now - self._month_start
        if -_CLOCK_STEP_BACK_MS < elapsed < 0:
            elapsed = 0
        return "%s%08X" % (self._prefix_hex, elapsed & 0xFFFFFFFF)  # noqa: UP031 (fastest)

    def next_id(self) -> str:
        clock = self._clock  # inlined clock read: this is per message
        now = int((time.time() if clock is None else clock()) * 1000)
        if now != self._head_ms:
            # The head only changes once a millisecond: format it then, so most ids cost one
            # clock read and a 4-char format (~2x cheaper).
            self._head_ms = now
            self._head = self._head_for(now)
        self._counter = counter = (self._counter + 1) & 0xFFFF
        return self._head + "%04X" % counter  # noqa: UP031 (fastest)

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids sharing one clock read (the batch path: ~4x cheaper per id)."""
        clock = self._clock
        head = self._head_for(int((time.time() if clock is None else clock()) * 1000))
        start = self._counter + 1
        self._counter = (self._counter + count) & 0xFFFF
        return self._counter_ids(head, start, count)


def recall_handle(timer_offset: int, message_id: str) -> str:
    """The recall handle of a timed message: its timer queue offset and unique id (the timer's
    cancel needs both: the offset finds it, the id proves the handle names it)."""
    return f"{timer_offset}.{message_id}"


def parse_recall_handle(handle: str) -> tuple[int, str] | None:
    """(timer offset, message id), or None for a malformed handle."""
    offset, _, message_id = handle.partition(".")
    if not offset.isdigit() or not message_id:
        return None
    return int(offset), message_id
