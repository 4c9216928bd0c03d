"""Body compression, RocketMQ style: bodies above a threshold are zlib-compressed by the
producer (sysFlag bit 0x1, ``compressed=true`` on the wire) and inflated by consumers."""

from __future__ import annotations

import zlib

COMPRESS_THRESHOLD = 4 * 1024  # RocketMQ's compressMsgBodyOverHowmuch default
COMPRESS_LEVEL = 5  # RocketMQ's default zlib level: good ratio at modest CPU


def maybe_compress(body: bytes, threshold: int = COMPRESS_THRESHOLD) -> tuple[bytes, bool]:
    """Return (payload, compressed). Compression is kept only if it actually saves bytes."""
    if len(body) <= threshold:
        return body, False
    packed = zlib.compress(body, COMPRESS_LEVEL)
    if len(packed) >= len(body):
        return body, False
    return packed, True


def decompress(payload: bytes, compressed: bool) -> bytes:
    return zlib.decompress(payload) if compressed else payload
