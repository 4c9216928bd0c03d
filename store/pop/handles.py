"""Receipt handles: ASCII strings naming one delivery of one message.

Format: ``<queue id>.<queue offset>.<nonce as 16 lower-case hex digits>``, e.g.
``3.1042.9f1c2b7d00e4a611``. The group and topic are not in it: ack and change-invisible name
them (as the v2 requests do), so a handle used with another group or topic is not found.

The nonce is 64 random bits drawn for every delivery (and every change of invisible time), and
journaled with it: a handle from an earlier delivery no longer matches the message in flight
(stale), and guessing a live one is a 2^-64 chance (forged). Both are rejected by the service
with ``InvalidReceiptHandleError``; ``parse_handle`` rejects what is not of this form.
"""

from __future__ import annotations

import os
import re
import struct
from typing import NamedTuple

from wharf.store.errors import InvalidReceiptHandleError

_HANDLE = re.compile(r"(\d{1,10})\.(\d{1,19})\.([0-9a-f]{16})")
MAX_HANDLE_LENGTH = 10 + 1 + 19 + 1 + 16


class Handle(NamedTuple):
    queue_id: int
    queue_offset: int
    nonce: int


# Nonces come from os.urandom (as ``secrets``) drawn 64 at a time: 0.2 us a nonce instead of
# 1.0 us for a getrandom syscall each.
_DRAW = struct.Struct(">64Q")
_nonces: list[int] = []


def new_nonce() -> int:
    """A random non-zero 64-bit nonce (cryptographically random: handles must not be
    guessable from the ones a client was given)."""
    if not _nonces:
        _nonces.extend(_DRAW.unpack(os.urandom(_DRAW.size)))
    return _nonces.pop() or 1


def format_handle(queue_id: int, queue_offset: int, nonce: int) -> str:
    return f"{queue_id}.{queue_offset}.{nonce:016x}"


def parse_handle(text: object) -> Handle:
    """The handle's parts; InvalidReceiptHandleError for anything not made by ``format_handle``."""
    if not isinstance(text, str) or len(text) > MAX_HANDLE_LENGTH:
        raise InvalidReceiptHandleError("malformed receipt handle")
    match = _HANDLE.fullmatch(text)
    if match is None:
        raise InvalidReceiptHandleError(f"malformed receipt handle {text[:64]!r}")
    queue_id, offset, nonce = int(match[1]), int(match[2]), int(match[3], 16)
    if queue_id > 0x7FFFFFFF or offset > 0x7FFFFFFFFFFFFFFF:
        raise InvalidReceiptHandleError(f"malformed receipt handle {text!r}")
    return Handle(queue_id, offset, nonce)
