"""Client-side unique message ids (UNIQ_KEY): the codec's ``UniqueIdGenerator`` (RocketMQ's
MessageClientIDSetter layout, see ``wharf.store.codec.ids``) with this host's ipv4 and the
compiled batch formatter ``_record_encoder.counter_ids`` when the install built it (its
differential test: tests/client/test_fast_record_encoder.py).
"""

from __future__ import annotations

import socket
import time  # noqa: F401 (tests patch ``ids.time.time``: the generator reads it per call)

from wharf.store import fast
from wharf.store.codec.ids import UniqueIdGenerator

__all__ = ["UniqueIdGenerator", "new_unique_id", "new_unique_ids"]

_compiled = fast.load("_record_encoder")
# head, first counter, count -> ids; None: the codec's list comprehension.
_counter_ids = None if _compiled is None else _compiled.counter_ids


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


_DEFAULT = UniqueIdGenerator(_local_ipv4(), counter_ids=_counter_ids)


def new_unique_id() -> str:
    """A fresh 32-hex-character UNIQ_KEY."""
    return _DEFAULT.next_id()


def new_unique_ids(count: int) -> list[str]:
    return _DEFAULT.next_ids(count)
