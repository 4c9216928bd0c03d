"""One ``syncfs(2)`` for a whole filesystem, where it is as reliable as a sync a file.

Why: the consume queues' thorough flush (``store.services.queue_flush``, every 60 s) synced
every unflushed queue file on its own, an open, an fdatasync and a close each. At 40,000 busy
queues (10,000 topics) one pass took 3.9 s and 1.75 s of CPU in its thread, taking the GIL
~120,000 times beside the loop, every minute; one ``syncfs`` writes back the same pages and
commits the journal once: 0.29 s, 0.02 s of CPU (``tests.bench.thorough_flush``).

Where: only on a local filesystem that implements it and reports write-back errors through
it: ext4, xfs, btrfs, f2fs, on Linux 5.8 or later (before 5.8 ``syncfs`` returned 0 even after
a failed write-back, where ``fdatasync`` reports it). Elsewhere (FUSE, NFS, overlay, tmpfs, an
unknown type) ``whole_fs_sync`` answers None and the caller syncs file by file. FUSE matters
here: a FUSE server learns of ``syncfs`` only if it implements FUSE_SYNCFS (the fault
campaign's power-loss filesystem, ``tests/fault/powerfs.py``, does not), so data synced that
way would not count as synced there.

What it costs: it also writes back whatever else is dirty on that filesystem (the commit
log's pages not yet flushed, other programs' files): the same bytes the kernel writes within
``dirty_expire_centisecs`` (30 s) anyway, earlier.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import re
from collections.abc import Callable

# Filesystems whose syncfs writes back and commits like fsync, and reports write-back errors
# (Linux >= 5.8): see the module docstring.
SYNCFS_TYPES = frozenset({"ext4", "xfs", "btrfs", "f2fs"})
MIN_KERNEL = (5, 8)
MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


def filesystem_type(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """The type of the filesystem ``path`` is on (the longest mount point above it in
    ``mountinfo``), or None when it cannot be told."""
    target = os.path.realpath(path)
    best, kind = "", None
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split()
                if "-" not in fields[6:]:
                    continue
                dash = fields.index("-", 6)
                point = _unescape(fields[4])
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best) and len(fields) > dash + 1:
                    best, kind = point, fields[dash + 1]
    except OSError:
        return None
    return kind


def _unescape(text: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash in octal (``\040``), every other
    character as it is (``unicode_escape`` turned a UTF-8 name beside an escape into other
    characters, and the path then matched the mount above it: a FUSE mount read as its ext4
    parent)."""
    return _OCTAL.sub(lambda found: chr(int(found.group(1), 8)), text)


def kernel_version(release: str | None = None) -> tuple[int, int]:
    """(major, minor) of the running kernel (0, 0 if it cannot be read)."""
    parts = (release or platform.release()).split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def whole_fs_sync(root: str) -> Callable[[], None] | None:
    """A function that syncs the filesystem holding ``root`` (``OSError`` as ``fdatasync``
    raises it), or None where that is not reliable (module docstring)."""
    if kernel_version() < MIN_KERNEL or filesystem_type(root) not in SYNCFS_TYPES:
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    call = getattr(libc, "syncfs", None)
    if call is None:
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int

    def sync() -> None:
        # A descriptor of its own each time (any thread): it sees write-back errors nobody
        # has seen yet, as an fdatasync through a new descriptor does. ctypes releases the GIL.
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if call(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs of {root}: {os.strerror(err)}")
        finally:
            os.close(fd)

    return sync
