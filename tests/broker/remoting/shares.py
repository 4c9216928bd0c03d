"""Ending consumers of one group that split the queues: neither knows its share, so each
writes what it gets to a progress file (``cpp_client_script.py consume`` with ``progress``)
and the test stops them all (``stop_file``) once their union holds every body. Waiting for a
time-out instead cost 30 s per test (the C++ consumers ran to their ``timeout``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

# After the union is complete: long enough for a duplicate delivery to show up, which the
# tests' "once each" assertions then catch.
DUPLICATE_WINDOW_S = 1.0


def stop_when_all_seen(
    progress: Iterable[Path], bodies: Iterable[str], stop_file: Path, timeout: float
) -> None:
    """Wait until the progress files hold every one of ``bodies`` between them (or
    ``timeout``), then DUPLICATE_WINDOW_S, then create ``stop_file``; the consumers' own
    results say what they got either way."""
    files, wanted = list(progress), set(bodies)
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        seen = {line for path in files if path.exists() for line in path.read_text().splitlines()}
        if seen >= wanted:
            time.sleep(DUPLICATE_WINDOW_S)
            break
        time.sleep(0.1)
    stop_file.touch()
