"""Hop stamps: where a message's time goes, for latency breakdowns (off by default).

When the environment variable ``WHARF_HOP_TRACE`` names a file at import time, ``stamp(name)``
records ``(name, time.time_ns())`` in memory (at most ``MAX_STAMPS``, 1M: ~100 MB at worst,
then further stamps are dropped) and the process writes them to that file, one
``name ns`` line each, when it exits. Wall-clock nanoseconds, so the stamps of a client and a
broker on one machine fall on one time line. Off (the default), a call site costs one global
lookup: every caller guards with ``if hops.ENABLED:``.

``tests/bench/read_path.py`` (part 3) sends lone messages and splits each one's time from
``send()`` to the handler at these stamps.
"""

from __future__ import annotations

import atexit
import os
import time

MAX_STAMPS = 1_000_000
_PATH = os.environ.get("WHARF_HOP_TRACE", "")
ENABLED = bool(_PATH)
STAMPS: list[tuple[str, int]] = []


def stamp(name: str) -> None:
    """Record that ``name`` happened now (callers check ``ENABLED`` first)."""
    if len(STAMPS) < MAX_STAMPS:
        STAMPS.append((name, time.time_ns()))


def stamp_at(name: str, ns: int) -> None:
    """Record that ``name`` happened at ``ns`` (``time.time_ns()`` clock), measured elsewhere
    (a thread that runs no Python)."""
    if len(STAMPS) < MAX_STAMPS:
        STAMPS.append((name, ns))


def write(path: str) -> None:
    """Write the stamps recorded so far to ``path`` (``name ns`` lines)."""
    with open(path, "w", encoding="ascii") as handle:
        handle.writelines(f"{name} {ns}\n" for name, ns in STAMPS)


def read(path: str) -> list[tuple[str, int]]:
    """The stamps a process wrote with ``write``."""
    with open(path, encoding="ascii") as handle:
        return [(name, int(ns)) for name, ns in (line.split() for line in handle if line.strip())]


if ENABLED:
    atexit.register(write, _PATH)
