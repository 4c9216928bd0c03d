"""A stored message's body as a reader receives it: the one place where body decoding is
decided, for every protocol (the broker's front ends and the Kafka converter,
``kafka_records`` and its compiled twin ``store/fast/_kafka_convert.c``, which calls ``inflate``).

The store keeps a body as its producer sent it. The SDK, ``wharf send`` and the RocketMQ 4.x
clients zlib-compress bodies over 4 KiB and say so with SYSFLAG bit 0x1 (COMPRESSED); the
store's record codec decodes the properties once for every reader. What each protocol does
with the flag:

- wharf.v1 (``compressed`` on the MessageView) and remoting (the record's sysFlag) carry it:
  the stored bytes go out and the client inflates them, as RocketMQ's clients do;
- apache.rocketmq.v2 (bodies leave IDENTITY-encoded) and Kafka (the record value is the body)
  cannot carry it: their readers get ``plain_body``, the inflated body.

The mapping of every other field across protocols: broker/frontends/kafka/README.md "Mapping".
Sans-IO as the rest of the codec: zlib only (a warning is logged, rate-limited, for a damaged body).
"""

from __future__ import annotations

import logging
import time
import zlib

from wharf.store.codec.layout import SYSFLAG_COMPRESSED

__all__ = ["MAX_INFLATED", "inflate", "plain_body"]

log = logging.getLogger(__name__)
# A producer checks a body against maxMessageSize (4 MiB by default) before compressing it, so
# a real body inflates to at most that; 64 MiB (Kafka's largest frame here) bounds what a
# crafted one can make the broker allocate (zlib reaches ~1000:1).
MAX_INFLATED = 64 * 1024 * 1024
_WARN_EVERY_S = 60.0  # one warning a minute: a damaged body is read again by every consumer
_warned_at = -_WARN_EVERY_S


def inflate(body: bytes | memoryview) -> bytes:
    """A COMPRESSED body inflated. One that does not inflate (not zlib, cut short, or over
    ``MAX_INFLATED``) is answered as stored, with a warning: a consumer must move past a
    record it cannot be given whole rather than fail on it at every read."""
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        return _as_stored(body, f"not zlib ({exc})")
    if not inflater.eof:
        why = "over 64 MiB inflated" if inflater.unconsumed_tail else "cut short"
        return _as_stored(body, why)
    return plain


def plain_body(body: bytes, sys_flag: int) -> bytes:
    """The body a reader of a protocol without a compression flag gets."""
    if sys_flag & SYSFLAG_COMPRESSED:
        return inflate(body)
    return body


def _as_stored(body: bytes | memoryview, why: str) -> bytes:
    global _warned_at
    now = time.monotonic()
    if now - _warned_at >= _WARN_EVERY_S:
        _warned_at = now
        log.warning("a body flagged COMPRESSED does not inflate (%s): delivered as stored", why)
    return bytes(body)
