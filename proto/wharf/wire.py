"""The Wharf wire protocol: the calls of wharf.v1 (and every other service the broker serves
over gRPC) on one plain TCP or TLS connection, framed, for the hot paths (send, pull).

Why a second transport: on this machine a grpc.aio stream message round trip costs p50
262-333 us and a unary call 736-784 us, a round trip of raw asyncio TCP 20-26 us
(``python -m tests.bench.transport_floor``); a lone message crosses two such hops between
``send()`` and its handler. RocketMQ (remoting) and Kafka answer the same way: a framed binary
protocol of their own. Requests and replies are the same protobuf messages as over gRPC and go
to the same handlers, behind the same ACL; only the framing differs.

Connection: each side first writes ``PREFACE`` (8 bytes), then frames, big-endian::

    u32 payload length | u8 kind | u32 call id | payload          (header: 9 bytes)

=========== ====== =======================================================================
kind        sender payload
=========== ====== =======================================================================
OPEN        client starts call ``id``: JSON ``{"method": "/pkg.Service/Method",
                   "metadata": [[key, value], ...], "timeout": seconds or null}``
MESSAGE     both   one serialized request (client) or response (server) of call ``id``
HALF_CLOSE  client no more requests on call ``id``
CANCEL      client the client gave up call ``id``: its handler is cancelled, no STATUS follows
STATUS      server call ``id`` ended: JSON ``{"code": gRPC status number, "details": str}``
=========== ====== =======================================================================

Call ids are the client's choice, unique among its open calls on the connection. A unary
request is OPEN + MESSAGE + HALF_CLOSE in one write; its reply MESSAGE + STATUS in one write.
Statuses carry gRPC's code numbers, so a client maps errors the same way on both transports.

Bounds: a frame longer than the receiver's limit ends the connection (the peer is broken or
hostile: its frames can no longer be trusted); flow control is TCP's (a side that stops
reading stops the other side's writes; see the server and client modules).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import struct
import tempfile
from typing import Any, cast

PREFACE = b"WHARF/1\n"
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what a gRPC client opens with
HEADER = struct.Struct("!IBI")
HEADER_SIZE = HEADER.size
OPEN, MESSAGE, HALF_CLOSE, CANCEL, STATUS = 1, 2, 3, 4, 5
SCHEME = "wire://"  # an endpoint with this prefix dials the wire port

WRITE_HIGH_WATER = 1 << 20  # a transport's write buffer above this holds its writers
_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


class ProtocolError(Exception):
    """The peer broke the framing (bad preface, oversized or unknown frame)."""


def header(kind: int, call_id: int, length: int) -> bytes:
    return _pack(length, kind, call_id)


def frame(kind: int, call_id: int, payload: bytes = b"") -> bytes:
    return _pack(len(payload), kind, call_id) + payload


def encode_open(method: str, metadata: Any, timeout: float | None) -> bytes:
    pairs = [[str(key), str(value)] for key, value in (metadata or ())]
    return json.dumps({"method": method, "metadata": pairs, "timeout": timeout}).encode()


def decode_open(payload: bytes) -> tuple[str, tuple[tuple[str, str], ...], float | None]:
    """(method, metadata pairs, timeout); ProtocolError when it does not parse."""
    try:
        head = json.loads(payload)
        method = head["method"]
        metadata = tuple((str(k), str(v)) for k, v in head.get("metadata") or ())
        timeout = head.get("timeout")
        if not isinstance(method, str) or (
            timeout is not None and not isinstance(timeout, int | float)
        ):
            raise TypeError("method must be a string and timeout a number")
    except (ValueError, TypeError, KeyError) as exc:
        raise ProtocolError(f"OPEN frame does not parse: {exc}") from None
    return method, metadata, timeout


def encode_status(code: int, details: str) -> bytes:
    return json.dumps({"code": code, "details": details}).encode()


def decode_status(payload: bytes) -> tuple[int, str]:
    try:
        status = json.loads(payload)
        return int(status["code"]), str(status.get("details") or "")
    except (ValueError, TypeError, KeyError) as exc:
        raise ProtocolError(f"STATUS frame does not parse: {exc}") from None


def load_cert_chain_pem(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``context.load_cert_chain`` from PEM bytes (both ends hold checked bytes, not paths): the
    ssl module loads a chain from files only, so a private temporary directory holds them for
    the call."""
    with tempfile.TemporaryDirectory() as folder:
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        context.load_cert_chain(cert, key)


class FrameReader:
    """Sans-IO: bytes in, ``(kind, call_id, payload)`` out. The peer's preface is checked
    first; ``max_payload`` bounds a frame (ProtocolError beyond it, before it is buffered)."""

    __slots__ = ("_buffer", "_max_payload", "_preface_seen")

    def __init__(self, max_payload: int) -> None:
        self._buffer = bytearray()
        self._max_payload = max_payload
        self._preface_seen = False

    @property
    def preface_seen(self) -> bool:
        """The peer's preface has arrived: it speaks the wire protocol."""
        return self._preface_seen

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames (a frame begun, or the preface)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data  # the common case: whole frames in one read, sliced without a copy
        pos = 0
        end = len(view)
        if not self._preface_seen:
            if end < len(PREFACE):
                if not PREFACE.startswith(bytes(view)):
                    raise ProtocolError(_not_wire(bytes(view)))
                if not buffer:
                    buffer += data
                return []
            if view[: len(PREFACE)] != PREFACE:
                raise ProtocolError(_not_wire(bytes(view[: len(HTTP2_PREFACE)])))
            self._preface_seen = True
            pos = len(PREFACE)
        frames: list[tuple[int, int, bytes]] = []
        limit = self._max_payload
        while end - pos >= HEADER_SIZE:
            length, kind, call_id = _unpack_from(view, pos)
            if length > limit:
                raise ProtocolError(
                    f"frame of {length} bytes is over this side's limit of {limit} bytes"
                )
            if not OPEN <= kind <= STATUS:
                raise ProtocolError(f"unknown frame kind {kind}")
            stop = pos + HEADER_SIZE + length
            if stop > end:
                break
            frames.append((kind, call_id, bytes(view[pos + HEADER_SIZE : stop])))
            pos = stop
        if buffer:
            del buffer[:pos]
        elif pos < end:
            buffer += view[pos:]
        return frames


def _not_wire(head: bytes) -> str:
    if head.startswith(b"PRI ") or head[3:4] == b"\x04":  # HTTP/2: preface / SETTINGS frame
        return (
            "the peer speaks HTTP/2 (gRPC), not the Wharf wire protocol: dial the gRPC port "
            "without the wire:// prefix, or the wire port with it"
        )
    if head[:1] in (b"\x15", b"\x16"):  # a TLS record: alert / handshake
        return "the peer speaks TLS and this side does not: enable TLS on both or neither"
    return f"the peer did not open with the Wharf wire preface (got {head[:8]!r})"


class FramedProtocol(asyncio.Protocol):
    """What both ends of a connection share: the preface on connect, frames out of
    ``self.reader``, writers held while the transport's buffer is above ``WRITE_HIGH_WATER``
    (``await drained()``), and reading paused while more than ``queue_limit`` bytes of
    received frames wait for their readers (``queued(+n)`` on arrival, ``queued(-n)`` when
    taken), so TCP holds the peer's writes."""

    def __init__(self, max_payload: int, queue_limit: int) -> None:
        self.reader = FrameReader(max_payload)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._writable: asyncio.Future[None] | None = None  # set while writes are paused
        self._queue_limit = queue_limit
        self._queued = 0
        self._reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        transport.write(PREFACE)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.wake_writers()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.wake_writers()

    def wake_writers(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def paused(self) -> bool:
        """The transport's buffer is above ``WRITE_HIGH_WATER``: writers wait (``drained``)."""
        return self._writable is not None

    async def drained(self) -> None:
        waiter = self._writable
        if waiter is not None:
            await asyncio.shield(waiter)

    def queued(self, nbytes: int) -> None:
        self._queued += nbytes
        transport = self.transport
        if transport is None or self.closed:
            return
        if not self._reading_paused and self._queued > self._queue_limit:
            self._reading_paused = True
            transport.pause_reading()
        elif self._reading_paused and self._queued <= self._queue_limit // 2:
            self._reading_paused = False
            transport.resume_reading()
