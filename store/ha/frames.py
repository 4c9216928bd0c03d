"""The replication wire format (sans-IO): frames between a master's HA listener and a slave.

Plain TCP, not gRPC: per 32-256 KiB frame a grpc.aio bidi stream cost 6-8x the CPU of asyncio
streams on this box (``../shared/reference/cluster.md`` section 3), and every SYNC_MASTER send
batch becomes one small frame. Each frame is::

    u32 length   bytes after this field (type + payload), at most MAX_FRAME
    u8  type     one of the FrameType values
    payload      fixed big-endian fields, then a tail of bytes (log data, text, metadata)

Conversation (``VERSION`` 2; the proofs: ``auth.py``)::

    master -> CHALLENGE a fresh nonce, as soon as the connection is accepted
    slave  -> HELLO    magic b"WHA1", version, segment size, max offset, broker id, its own
                       nonce, "cluster\\nname\\nepochs\\naccess key" (epochs: "epoch:start,..."
                       of ``epochs.py``), proof (zeros without an account)
    master -> WELCOME  min offset, max offset, confirm offset, start offset (where DATA starts;
                       below the slave's end: truncate to it first), "epochs" of the master,
                       proof (zeros without an account)
           or ERROR    utf-8 text (not authenticated, segment sizes differ, the slave's log
                       does not continue the master's ...); the master closes after it
    master -> DATA     offset, confirm offset, log bytes: whole records, never across a segment
                       end (an empty DATA is the heartbeat)
           -> BLANK    offset: the segment ends here (the slave writes the same blank marker)
           -> METADATA opaque bytes the broker layers above give and take (topics, groups,
                       consumer offsets), sent on connect and when they change
    slave  -> REPORT   written offset, flushed offset, METADATA frames applied on this
                       connection (after each append, each flush, each METADATA frame applied,
                       and every haSendHeartbeatInterval; the count is absent from a replica
                       of an older version, a master of an older version ignores it)

Anything else, a frame larger than ``MAX_FRAME``, or a HELLO with another magic or version
closes the connection: an HA port must not take offsets from whatever connects to it (RocketMQ
4 had no handshake, #3015).
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass

from wharf.store.ha.auth import NONCE_SIZE, PROOF_SIZE

MAGIC = b"WHA1"
VERSION = 2  # 2: CHALLENGE and the proofs
# A DATA frame carries at most haTransferBatchSize (default 1 MiB) or one record (<= 4 MiB
# maxMessageSize + header): 64 MiB bounds what a peer can make the other buffer.
MAX_FRAME = 64 * 1024 * 1024

_LENGTH = struct.Struct(">IB")  # length, type
# magic, version, segment size, max offset, broker id, the replica's nonce
_HELLO = struct.Struct(f">4sHQQI{NONCE_SIZE}s")
_WELCOME = struct.Struct(">QQQQ")  # min, max, confirm, start
_DATA = struct.Struct(">QQ")  # offset, confirm
_OFFSET = struct.Struct(">Q")
_REPORT = struct.Struct(">QQ")  # written, flushed
_REPORT_METADATA = struct.Struct(">QQQ")  # written, flushed, METADATA frames applied


class FrameType(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    ERROR = 3
    DATA = 4
    BLANK = 5
    METADATA = 6
    REPORT = 7
    CHALLENGE = 8


class ProtocolError(ValueError):
    """The peer sent something this protocol does not allow: close the connection."""


@dataclass(frozen=True, slots=True)
class Hello:
    segment_size: int
    max_offset: int
    broker_id: int
    cluster: str
    broker_name: str
    epochs: tuple[tuple[int, int], ...] = ()
    nonce: bytes = bytes(NONCE_SIZE)
    access_key: str = ""


@dataclass(frozen=True, slots=True)
class Welcome:
    min_offset: int
    max_offset: int
    confirm_offset: int
    start_offset: int
    epochs: tuple[tuple[int, int], ...] = ()


def _epochs_text(epochs: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{epoch}:{start}" for epoch, start in epochs)


def _epochs_of(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = [item.split(":") for item in text.split(",") if item]
        return tuple((int(epoch), int(start)) for epoch, start in pairs)
    except ValueError:
        raise ProtocolError(f"malformed epoch list {text[:80]!r}") from None


def frame(kind: FrameType, payload: bytes = b"") -> bytes:
    return _LENGTH.pack(len(payload) + 1, kind) + payload


def data_header(offset: int, confirm: int, size: int) -> bytes:
    """The frame header of a DATA frame whose ``size`` log bytes follow (sent separately, so
    the bytes read from the log are not copied into the frame)."""
    return _LENGTH.pack(_DATA.size + size + 1, FrameType.DATA) + _DATA.pack(offset, confirm)


# A proof over the frame's payload before it: signed bytes -> PROOF_SIZE bytes.
Prove = Callable[[bytes], bytes]


def encode_challenge(nonce: bytes) -> bytes:
    return frame(FrameType.CHALLENGE, nonce)


def decode_challenge(payload: bytes) -> bytes:
    if len(payload) != NONCE_SIZE:
        raise ProtocolError(f"CHALLENGE of {len(payload)} bytes (expected {NONCE_SIZE})")
    return payload


def encode_hello(hello: Hello, prove: Prove) -> bytes:
    fixed = _HELLO.pack(
        MAGIC, VERSION, hello.segment_size, hello.max_offset, hello.broker_id, hello.nonce
    )
    tail = f"{hello.cluster}\n{hello.broker_name}\n{_epochs_text(hello.epochs)}\n{hello.access_key}"
    signed = fixed + tail.encode()
    return frame(FrameType.HELLO, signed + prove(signed))


def decode_hello(payload: bytes) -> tuple[Hello, bytes, bytes]:
    """(the HELLO, the bytes its proof covers, the proof)."""
    magic, version = payload[:4], int.from_bytes(payload[4:6], "big")
    if len(payload) >= 6 and (magic != MAGIC or version != VERSION):
        raise ProtocolError(
            f"not a Wharf replica of this version (magic {magic!r}, version {version}; "
            f"this master speaks version {VERSION})"
        )
    if len(payload) < _HELLO.size + PROOF_SIZE:
        raise ProtocolError("HELLO too short")
    signed, proof = payload[:-PROOF_SIZE], payload[-PROOF_SIZE:]
    _, _, segment_size, max_offset, broker_id, nonce = _HELLO.unpack_from(signed)
    cluster, name, epochs, access_key = _lines(signed[_HELLO.size :], 4)
    hello = Hello(
        segment_size, max_offset, broker_id, cluster, name, _epochs_of(epochs), nonce, access_key
    )
    return hello, signed, proof


def encode_welcome(welcome: Welcome, prove: Prove) -> bytes:
    fixed = _WELCOME.pack(
        welcome.min_offset, welcome.max_offset, welcome.confirm_offset, welcome.start_offset
    )
    signed = fixed + _epochs_text(welcome.epochs).encode()
    return frame(FrameType.WELCOME, signed + prove(signed))


def decode_welcome(payload: bytes) -> tuple[Welcome, bytes, bytes]:
    """(the WELCOME, the bytes its proof covers, the proof)."""
    if len(payload) < _WELCOME.size + PROOF_SIZE:
        raise ProtocolError(f"WELCOME frame too short ({len(payload)} bytes)")
    signed, proof = payload[:-PROOF_SIZE], payload[-PROOF_SIZE:]
    low, high, confirm, start = _WELCOME.unpack_from(signed)
    epochs = _epochs_of(signed[_WELCOME.size :].decode("ascii", "replace"))
    return Welcome(low, high, confirm, start, epochs), signed, proof


def _lines(data: bytes, count: int) -> list[str]:
    """``count`` newline-separated fields; missing trailing ones are empty."""
    parts = data.decode("utf-8", "replace").split("\n", count - 1)
    return parts + [""] * (count - len(parts))


def decode_data(payload: memoryview) -> tuple[int, int, memoryview]:
    """(offset, confirm offset, log bytes)."""
    offset, confirm = _unpack(_DATA, payload, "DATA")
    return offset, confirm, payload[_DATA.size :]


def encode_blank(offset: int) -> bytes:
    return frame(FrameType.BLANK, _OFFSET.pack(offset))


def decode_offset(payload: bytes) -> int:
    return int(_unpack(_OFFSET, payload, "BLANK")[0])


def encode_report(written: int, flushed: int, metadata_applied: int = 0) -> bytes:
    return frame(FrameType.REPORT, _REPORT_METADATA.pack(written, flushed, metadata_applied))


def decode_report(payload: bytes) -> tuple[int, int, int | None]:
    """(written, flushed, METADATA frames applied: None from a replica that does not count)."""
    if len(payload) >= _REPORT_METADATA.size:
        written, flushed, applied = _REPORT_METADATA.unpack_from(payload)
        return written, flushed, applied
    written, flushed = _unpack(_REPORT, payload, "REPORT")
    return written, flushed, None


def _unpack(fmt: struct.Struct, payload: bytes | memoryview, name: str) -> tuple[int, ...]:
    if len(payload) < fmt.size:
        raise ProtocolError(f"{name} frame too short ({len(payload)} bytes)")
    return fmt.unpack_from(payload)


async def read_frame(reader: asyncio.StreamReader) -> tuple[FrameType, bytes]:
    """Read one frame from an ``asyncio.StreamReader``. IncompleteReadError at EOF,
    ProtocolError for an unknown type or an oversized frame."""
    head = await reader.readexactly(_LENGTH.size)
    length, kind = _LENGTH.unpack(head)
    if not 1 <= length <= MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes (limit {MAX_FRAME})")
    try:
        frame_type = FrameType(kind)
    except ValueError:
        raise ProtocolError(f"unknown frame type {kind}") from None
    payload = await reader.readexactly(length - 1) if length > 1 else b""
    return frame_type, payload
