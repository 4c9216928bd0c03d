"""Process-wide glibc malloc settings for processes that move large buffers (the broker daemon,
the ``wharf`` CLI and its benchmarks).

Send batches and pull replies are 0.1-1 MiB ``bytes`` objects, created and freed thousands of
times a second. With glibc's defaults such a buffer is often a fresh ``mmap`` (or heap memory
just trimmed back to the OS), so every page of it faults in again on first touch: measured here
0.7-1.5 us per KiB copied, more than the copy itself. Keeping big blocks on the heap and not
trimming it makes them reuse warm pages: with both processes tuned, ``wharf bench produce
--tasks 50 --batch 16`` went from 76-105k to 115-144k msg/s (client 6.0 -> 4.7-5.0 us/msg,
broker 5.7-6.0 -> 5.3-5.6 us/msg), and pulls of 1024 cost the broker ~2.0 instead of 4.1-4.6
us/msg. The price is memory: freed buffers stay mapped to the process (bounded by the peak of
buffers in flight). Same effect as
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own upper bound for the dynamic threshold
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_large_buffers_on_heap() -> bool:
    """Apply the settings above; False (and nothing changed) where malloc is not glibc's."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if not applied:
        log.debug("mallopt refused the large-buffer settings; keeping malloc's defaults")
    return applied
