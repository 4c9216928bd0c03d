"""powerfs: a FUSE filesystem that loses, on command, everything not yet made durable (issue 36).

    python -m tests.fault.powerfs BACKING MOUNTPOINT --control SOCKET

Files live in the real directory BACKING; the mount at MOUNTPOINT shows them, but changes stay in
this process's memory until the application makes them durable, as on a disk with a volatile
write cache. A *cut* (``PowerFS.cut()``, the line ``cut`` on the control socket, or SIGUSR1 to the
daemon) drops every change not yet durable, as a power loss would.

Durability model (POSIX-strict; stricter than ext4/xfs, which commit more than asked):

* Durable state = the content of BACKING (minus its hidden ``.powerfs`` staging folder, which
  holds the durable data of files whose directory entry is not durable yet, and is emptied at
  start and at each cut).
* File data and size: ``write``, ``truncate``/``ftruncate``, ``fallocate``/``posix_fallocate``
  (mode 0 grows the size; KEEP_SIZE is a no-op) and ``O_TRUNC`` change an in-memory overlay of
  the file (16 KiB chunks over the durable content; reads see it). ``fsync`` or ``fdatasync`` of
  the file (any handle of it) applies the whole overlay and size to the backing file (and fsyncs
  that, unless ``--no-backing-sync``): all data written before the call is durable after it.
  A file fsync never makes the file's directory entry durable.
* Namespace: ``create``, ``mkdir``, ``link``, ``unlink``, ``rmdir`` and ``rename`` change the
  in-memory directory tree at once and are appended to an ordered metadata journal. A directory
  fsync (``os.open(dir, O_RDONLY)`` + ``os.fsync``) of D commits, in journal order, the pending
  operations that change D's entries, plus (transitively) the earlier operations those need:
  earlier changes of the same names or the same inodes, the creation or move of the directories
  they are in (so fsync of a new directory makes it reachable, as on ext4/xfs), and the changes
  inside a directory they remove or move. Other directories' changes stay pending: no state after
  a cut is one the application could not have seen. A rename is one operation: committed by an
  fsync of either directory, it is never in both nor in neither. Consequences: a new file whose
  directory was never fsynced is gone after a cut even if the file was fsynced (its data sat in
  staging); a file whose entry was made durable but whose data was not is there with its last
  durable data and size (empty if never synced); a rename, link or unlink not committed is
  undone. mode/owner/times are kept in memory only (not modelled). Symlinks and device nodes
  are not supported (ENOSYS).
* Extra control commands: ``sync`` (everything durable, as sync(1)), ``commit-names`` (the
  journal only, as if every directory were fsynced: tells a missing directory fsync from a
  missing data sync), ``pending`` (what a cut would drop), ``stats``.

Memory maps. Writable MAP_SHARED maps work because the mount does not use ``direct_io`` (FUSE
refuses shared writable maps of direct_io files) nor the kernel's ``writeback_cache`` (so plain
``write``/``pwrite`` reach this layer synchronously, as ``write`` ops, before the syscall
returns). A store into a map only dirties a page in the kernel's page cache; the layer sees
nothing until the kernel writes the page back, as an ordinary ``write`` op with the file's
handle: at the kernel's own pace (dirty expiry), on ``msync(MS_SYNC)`` (``mmap.flush()``),
``fsync``/``fdatasync`` of the file, at ``munmap``/process exit (FUSE's ``vma close`` writes the
dirty pages back) and at the last ``close``. For ``msync`` and ``fsync`` the kernel first writes
back all dirty pages of the file and waits for them, then sends the ``fsync`` op (msync with
datasync=1): so every store made into the map before the msync/fsync is durable after it. Pages
the kernel wrote back on its own, or at munmap/exit, land in the overlay like any unsynced
write: a mapped write never followed by msync/fsync of that file is lost at a cut, whether the
kernel wrote it back (it sits in the overlay) or not (it sat in the page cache, which a cut
invalidates). Only "written back AND then fsynced" survives.

After a cut the daemon keeps running: the in-memory tree is reloaded from BACKING, every handle
opened before the cut is stale (any op on it but close fails with EIO, as if its process had
died with the machine, and late write-backs of its dirty pages are dropped), and inode times
are bumped so the kernel drops cached pages and attributes. Close every file (kill every process
using the mount) before cutting, and open files anew afterwards. Stopping the daemon (SIGTERM,
``PowerFS.stop()``, unmount) is a clean shutdown: everything pending is committed first, as a
real unmount does. A daemon killed with SIGKILL loses what was pending, like a cut; starting it
again on the same BACKING gives the durable state.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK = 16 * 1024  # overlay granularity (a multiple of the 4 KiB page the kernel writes back)
STAGE = ".powerfs"  # hidden folder at BACKING's root: durable data of not-yet-durable names
FALLOC_FL_KEEP_SIZE = 0x01
FUSE_CAP_WRITEBACK_CACHE = 1 << 16

log = logging.getLogger("powerfs")


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Inode:
    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "dlinks",
        "dsize",
        "entries",
        "fd",
        "floor",
        "gid",
        "gone",
        "handles",
        "ino",
        "is_dir",
        "mode",
        "mtime_ns",
        "nlink",
        "overlay",
        "size",
        "staged",
        "uid",
        "vname",
        "vparent",
    )

    def __init__(self, ino: int, is_dir: bool, mode: int, size: int = 0) -> None:
        now = time.time_ns()
        self.ino = ino
        self.is_dir = is_dir
        self.mode = mode
        self.uid = os.getuid()
        self.gid = os.getgid()
        self.atime_ns = self.mtime_ns = self.ctime_ns = now
        self.entries: dict[str, Inode] = {}  # directories: the volatile entries
        self.vparent: Inode | None = None  # volatile place (None: unlinked or root)
        self.vname = ""
        self.nlink = 1  # files: volatile names (hard links)
        self.dlinks: list[tuple[Inode, str]] = []  # durable names (parent, name) in BACKING
        self.staged = False  # durable data sits in BACKING/.powerfs/<ino>
        self.size = size  # size as the application sees it
        self.dsize = size  # size of the durable content
        self.floor = size  # durable bytes at or past floor read as zeros (a pending truncate)
        self.overlay: dict[int, bytearray] = {}  # chunk index -> CHUNK bytes, not yet durable
        self.fd: int | None = None  # the backing file, opened on demand
        self.handles = 0
        self.gone = False  # its last durable name was removed by a committed unlink/rename

    @property
    def dirty(self) -> bool:
        return bool(self.overlay) or self.size != self.dsize or self.floor < self.dsize


class PowerOps:
    """The filesystem, as mfusepy operations (path-based, libfuse 3 high-level API)."""

    use_ns = True

    def __init__(self, backing: str, backing_sync: bool = True) -> None:
        self.backing = os.path.abspath(backing)
        self.backing_sync = backing_sync
        self._mutex = threading.RLock()
        self.epoch = 0
        self.next_ino = 1
        self.next_fh = 1
        self.handles: dict[int, tuple[Inode, int]] = {}
        self.journal: list[tuple[Any, ...]] = []
        self.counters = {"cuts": 0, "fsyncs": 0, "dir_fsyncs": 0, "writes": 0, "committed_ops": 0}
        self.root = self._load()

    # ---- loading and the durable side -------------------------------------------------------

    def _new_ino(self) -> int:
        self.next_ino += 1
        return self.next_ino

    def _load(self) -> Inode:
        stage = os.path.join(self.backing, STAGE)
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        root = Inode(1, True, stat.S_IFDIR | 0o755)

        files: dict[tuple[int, int], Inode] = {}  # hard links share an inode

        def walk(node: Inode, path: str) -> None:
            with os.scandir(path) as it:
                for entry in it:
                    if node is root and entry.name == STAGE:
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        child = Inode(self._new_ino(), True, st.st_mode)
                        walk(child, entry.path)
                    elif stat.S_ISREG(st.st_mode):
                        known = files.get((st.st_dev, st.st_ino))
                        if known is not None:
                            node.entries[entry.name] = known
                            known.nlink += 1
                            known.dlinks.append((node, entry.name))
                            continue
                        child = Inode(self._new_ino(), False, st.st_mode, st.st_size)
                        files[(st.st_dev, st.st_ino)] = child
                    else:
                        continue  # symlinks and the like are not modelled
                    child.uid, child.gid = st.st_uid, st.st_gid
                    node.entries[entry.name] = child
                    child.vparent, child.vname = node, entry.name
                    child.dlinks.append((node, entry.name))

        walk(root, self.backing)
        return root

    def _bpath(self, node: Inode) -> str | None:
        """Where the node's durable content lives in BACKING (None: nowhere)."""
        if node is self.root:
            return self.backing
        if node.staged:
            return os.path.join(self.backing, STAGE, str(node.ino))
        if not node.dlinks:
            return None
        parent, name = node.dlinks[0]
        pdir = self._bpath(parent)
        return None if pdir is None else os.path.join(pdir, name)

    def _fd(self, node: Inode, create: bool = False) -> int | None:
        if node.fd is None:
            path = self._bpath(node)
            if path is None:
                if not create:
                    return None
                path = os.path.join(self.backing, STAGE, str(node.ino))
                node.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                node.staged = True
            else:
                node.fd = os.open(path, os.O_RDWR)
        return node.fd

    def _close_fd(self, node: Inode) -> None:
        if node.fd is not None:
            with contextlib.suppress(OSError):
                os.close(node.fd)
            node.fd = None

    def _sync_file(self, node: Inode, datasync: bool) -> None:
        if node.is_dir or not node.dirty:
            return
        if node.gone:
            return  # durably unlinked or replaced: nothing of it survives a cut anyway
        fd = self._fd(node, create=True)
        assert fd is not None
        if node.floor < node.dsize:
            os.ftruncate(fd, node.floor)
        for index in sorted(node.overlay):
            start = index * CHUNK
            n = min(CHUNK, node.size - start)
            if n > 0:
                os.pwrite(fd, memoryview(node.overlay[index])[:n], start)
        os.ftruncate(fd, node.size)
        if self.backing_sync:
            (os.fdatasync if datasync else os.fsync)(fd)
        node.dsize = node.floor = node.size
        node.overlay.clear()

    # ---- the metadata journal ---------------------------------------------------------------

    def _forget_durable(self, node: Inode, parent: Inode, name: str) -> None:
        """One durable name of the node goes away (before its backing entry is removed): the
        last one leaves it gone, its content kept reachable for open handles."""
        if len(node.dlinks) == 1 and node.handles and not node.is_dir:
            with contextlib.suppress(OSError):
                self._fd(node)
        node.dlinks = [(p, n) for p, n in node.dlinks if not (p is parent and n == name)]
        if not node.dlinks:
            node.gone = True

    def _replay(self, op: tuple[Any, ...], touched: set[str]) -> None:
        kind = op[0]
        if kind in ("create", "mkdir"):
            _, parent, name, node = op
            pdir = self._bpath(parent)
            assert pdir is not None, f"{kind} {name}: parent not durable"
            path = os.path.join(pdir, name)
            if kind == "mkdir":
                os.mkdir(path, node.mode & 0o7777)
            elif node.staged:
                os.rename(os.path.join(self.backing, STAGE, str(node.ino)), path)
                node.staged = False
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, node.mode & 0o7777))
                node.dsize = node.floor = 0  # the entry is durable, no data of it is
            node.dlinks.append((parent, name))
            touched.add(pdir)
        elif kind == "link":
            _, parent, name, node = op
            pdir, source = self._bpath(parent), self._bpath(node)
            assert pdir is not None and source is not None, f"link {name}: not durable"
            os.link(source, os.path.join(pdir, name))
            if node.staged:  # its first durable name: the staging copy is not needed
                os.unlink(source)
                node.staged = False
            node.dlinks.append((parent, name))
            touched.add(pdir)
        elif kind in ("unlink", "rmdir"):
            _, parent, name, node = op
            pdir = self._bpath(parent)
            assert pdir is not None
            self._forget_durable(node, parent, name)
            (os.rmdir if kind == "rmdir" else os.unlink)(os.path.join(pdir, name))
            touched.add(pdir)
        elif kind == "rename":
            _, sparent, sname, tparent, tname, node, replaced = op
            sdir, tdir = self._bpath(sparent), self._bpath(tparent)
            assert sdir is not None and tdir is not None
            if replaced is not None:
                self._forget_durable(replaced, tparent, tname)
            os.rename(os.path.join(sdir, sname), os.path.join(tdir, tname))
            node.dlinks = [
                (tparent, tname) if p is sparent and n == sname else (p, n) for p, n in node.dlinks
            ]
            touched.update((sdir, tdir))
        else:  # pragma: no cover
            raise AssertionError(op)
        self.counters["committed_ops"] += 1

    def _commit(self, ops: list[tuple[Any, ...]]) -> None:
        """Make ``ops`` (taken out of the journal, in journal order) durable."""
        touched: set[str] = set()
        for op in ops:
            self._replay(op, touched)
        if self.backing_sync:
            for path in touched:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    @staticmethod
    def _shape(op: tuple[Any, ...]) -> tuple[set[int], set[int], set[tuple[int, str]]]:
        """(directories whose entries it changes, inodes it moves/creates/removes, entries)."""
        if op[0] == "rename":
            _, sparent, sname, tparent, tname, node, replaced = op
            nodes = {id(node)} if replaced is None else {id(node), id(replaced)}
            entries = {(id(sparent), sname), (id(tparent), tname)}
            return {id(sparent), id(tparent)}, nodes, entries
        _, parent, name, node = op
        return {id(parent)}, {id(node)}, {(id(parent), name)}

    def _commit_dir(self, node: Inode) -> None:
        """fsync of a directory: its pending entry changes become durable, with (transitively)
        every earlier change they need: earlier changes of the same names or the same inodes,
        the creation/moves of the directories they are in, and the changes inside a directory
        they remove or move. Other directories' changes stay pending."""
        dirs: set[int] = set()
        nodes: set[int] = set()
        entries: set[tuple[int, str]] = set()
        chosen: list[int] = []
        for i in range(len(self.journal) - 1, -1, -1):
            op_dirs, op_nodes, op_entries = self._shape(self.journal[i])
            if (
                id(node) in op_dirs
                or op_entries & entries
                or op_nodes & nodes
                or op_nodes & dirs
                or op_dirs & nodes
            ):
                chosen.append(i)
                dirs |= op_dirs
                nodes |= op_nodes
                entries |= op_entries
        picked = set(chosen)
        ops = [op for i, op in enumerate(self.journal) if i in picked]
        self.journal = [op for i, op in enumerate(self.journal) if i not in picked]
        self._commit(ops)

    # ---- public commands --------------------------------------------------------------------

    def cut(self) -> None:
        """Power loss: forget everything not durable, reload the tree from BACKING."""
        with self._mutex:
            self.epoch += 1
            self.counters["cuts"] += 1

            def close_all(node: Inode) -> None:
                self._close_fd(node)
                for child in node.entries.values():
                    close_all(child)

            close_all(self.root)
            for node, _ in self.handles.values():
                self._close_fd(node)
            self.handles.clear()
            self.journal.clear()
            self.root = self._load()

    def sync_all(self) -> None:
        """What ``sync(1)`` would do: every file's data, then the whole journal."""
        with self._mutex:
            seen: set[int] = set()

            def walk(node: Inode) -> None:
                for child in node.entries.values():
                    walk(child)
                if not node.is_dir:
                    seen.add(id(node))
                    self._sync_file(node, False)

            walk(self.root)
            for node, epoch in self.handles.values():
                if epoch == self.epoch and id(node) not in seen:
                    self._sync_file(node, False)
            ops, self.journal = self.journal, []
            self._commit(ops)

    def commit_names(self) -> None:
        """Commit the metadata journal only, as if every directory had been fsynced: lets a
        test tell a missing directory fsync from missing data syncs."""
        with self._mutex:
            ops, self.journal = self.journal, []
            self._commit(ops)

    def stats(self) -> dict[str, Any]:
        with self._mutex:
            pending = 0

            def walk(node: Inode) -> None:
                nonlocal pending
                pending += len(node.overlay) * CHUNK
                for child in node.entries.values():
                    walk(child)

            walk(self.root)
            return {
                **self.counters,
                "epoch": self.epoch,
                "journal": len(self.journal),
                "overlay_bytes": pending,
                "open_handles": len(self.handles),
            }

    def _vpath(self, node: Inode) -> str:
        parts: list[str] = []
        while node.vparent is not None:
            parts.append(node.vname)
            node = node.vparent
        return "/" + "/".join(reversed(parts)) if node is self.root else "?/" + "/".join(parts)

    def pending(self) -> dict[str, Any]:
        """What a cut would drop: the journal's operations and the files with unsynced data."""
        with self._mutex:
            ops = []
            for op in self.journal:
                if op[0] == "rename":
                    ops.append(
                        f"rename {self._vpath(op[1])}/{op[2]} -> {self._vpath(op[3])}/{op[4]}"
                    )
                else:
                    ops.append(f"{op[0]} {self._vpath(op[1]).rstrip('/')}/{op[2]}")
            files = []

            def walk(node: Inode, path: str) -> None:
                for name, child in node.entries.items():
                    if child.is_dir:
                        walk(child, f"{path}/{name}")
                    elif child.dirty:
                        files.append(
                            f"{path}/{name}: size {child.size} (durable {child.dsize}), "
                            f"{len(child.overlay)} unsynced chunks"
                        )

            walk(self.root, "")
            return {"journal": ops, "unsynced_files": files}

    # ---- lookups ----------------------------------------------------------------------------

    def _lookup(self, path: str) -> Inode:
        node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise _err(errno.ENOTDIR)
            child = node.entries.get(part)
            if child is None:
                raise _err(errno.ENOENT)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Inode, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise _err(errno.ENOTDIR)
        if parent is self.root and name == STAGE:
            raise _err(errno.EACCES)
        return parent, name

    def _node(self, path: str | None, fh: int | None) -> Inode:
        if fh:
            entry = self.handles.get(fh)
            if entry is not None:
                return entry[0]
            if path is None:
                raise _err(errno.EIO)  # a handle from before a cut
        if path is None:
            raise _err(errno.EBADF)
        return self._lookup(path)

    def _handle(self, fh: int) -> Inode:
        entry = self.handles.get(fh)
        if entry is None or entry[1] != self.epoch:
            raise _err(errno.EIO)  # opened before a cut: its process died with the machine
        return entry[0]

    def _open_handle(self, node: Inode) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = (node, self.epoch)
        node.handles += 1
        return fh

    def _release(self, fh: int) -> None:
        entry = self.handles.pop(fh, None)
        if entry is None:
            return
        node = entry[0]
        node.handles -= 1
        if node.handles == 0 and not node.is_dir:
            self._close_fd(node)

    # ---- data -------------------------------------------------------------------------------

    def _backing_read(self, node: Inode, start: int, end: int) -> bytes:
        limit = min(node.dsize, node.floor, end)
        data = b""
        if start < limit:
            fd = self._fd(node)
            if fd is not None:
                data = os.pread(fd, limit - start, start)
        if len(data) < end - start:
            data += bytes(end - start - len(data))
        return data

    def _read(self, node: Inode, size: int, offset: int) -> bytes:
        end = min(offset + size, node.size)
        if offset >= end:
            return b""
        overlay = node.overlay
        if not overlay:
            return self._backing_read(node, offset, end)
        parts: list[bytes] = []
        pos = offset
        while pos < end:
            index = pos // CHUNK
            chunk = overlay.get(index)
            if chunk is not None:
                stop = min((index + 1) * CHUNK, end)
                parts.append(bytes(chunk[pos - index * CHUNK : stop - index * CHUNK]))
                pos = stop
                continue
            stop = pos
            while stop < end and (stop // CHUNK) not in overlay:
                stop = min((stop // CHUNK + 1) * CHUNK, end)
            parts.append(self._backing_read(node, pos, stop))
            pos = stop
        return b"".join(parts)

    def _write(self, node: Inode, data: bytes, offset: int) -> int:
        view = memoryview(data)
        pos, end = offset, offset + len(data)
        while pos < end:
            index = pos // CHUNK
            cstart = index * CHUNK
            stop = min(cstart + CHUNK, end)
            chunk = node.overlay.get(index)
            if chunk is None:
                if pos == cstart and stop == cstart + CHUNK:
                    chunk = bytearray(CHUNK)
                else:
                    chunk = bytearray(self._backing_read(node, cstart, cstart + CHUNK))
                node.overlay[index] = chunk
            chunk[pos - cstart : stop - cstart] = view[pos - offset : stop - offset]
            pos = stop
        node.size = max(node.size, end)
        node.mtime_ns = node.ctime_ns = time.time_ns()
        return len(data)

    def _truncate(self, node: Inode, length: int) -> None:
        if node.is_dir:
            raise _err(errno.EISDIR)
        if length < node.size:
            node.floor = min(node.floor, length)
            for index in [i for i in node.overlay if i * CHUNK >= length]:
                del node.overlay[index]
            chunk = node.overlay.get(length // CHUNK)
            if chunk is not None:
                cut = length % CHUNK
                chunk[cut:] = bytes(CHUNK - cut)
        node.size = length
        node.mtime_ns = node.ctime_ns = time.time_ns()

    # ---- FUSE operations (mfusepy calls these; OSError(errno) becomes -errno) ---------------

    def init_with_config(self, conn: Any, config: Any) -> None:
        if config is not None:
            config.entry_timeout = 0.0
            config.attr_timeout = 0.0
            config.negative_timeout = 0.0
            config.hard_remove = 1  # unlink of an open file: no .fuse_hidden renames
            config.nullpath_ok = 1  # ops on such a file come with its handle only
            config.kernel_cache = 0
            config.auto_cache = 0
        if conn is not None:
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE  # write() must reach us before it returns

    def destroy(self, path: str) -> None:
        with self._mutex:
            try:
                self.sync_all()  # a clean unmount commits everything, as a real one does
            except OSError:
                log.exception("commit at unmount failed")

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:
            node = self._node(path, fh)
            nlink = 2 + sum(c.is_dir for c in node.entries.values()) if node.is_dir else node.nlink
            return {
                "st_mode": node.mode,
                "st_ino": node.ino,
                "st_nlink": nlink,
                "st_uid": node.uid,
                "st_gid": node.gid,
                "st_size": 4096 if node.is_dir else node.size,
                "st_blocks": (node.size + 511) // 512,
                "st_blksize": 4096,
                "st_atime": node.atime_ns,
                "st_mtime": node.mtime_ns,
                "st_ctime": node.ctime_ns,
            }

    def access(self, path: str, amode: int) -> int:
        with self._mutex:
            self._lookup(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.backing)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        return {**{k: getattr(st, k) for k in keys}, "f_frsize": st.f_frsize, "f_namemax": 255}

    def opendir(self, path: str) -> int:
        with self._mutex:
            node = self._lookup(path)
            if not node.is_dir:
                raise _err(errno.ENOTDIR)
            return self._open_handle(node)

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self._mutex:
            return [".", "..", *self._handle(fh).entries]

    def releasedir(self, path: str | None, fh: int) -> int:
        with self._mutex:
            self._release(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            node = self._handle(fh)
            self.counters["dir_fsyncs"] += 1
            self._commit_dir(node)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _err(errno.EEXIST)
            node = Inode(self._new_ino(), True, stat.S_IFDIR | (mode & 0o7777))
            self._link(parent, name, node)
            self.journal.append(("mkdir", parent, name, node))
        return 0

    def _link(self, parent: Inode, name: str, node: Inode) -> None:
        parent.entries[name] = node
        node.vparent, node.vname = parent, name
        parent.mtime_ns = parent.ctime_ns = time.time_ns()

    def _unlink(self, parent: Inode, name: str) -> Inode:
        node = parent.entries.pop(name)
        node.nlink -= 1
        if node.vparent is parent and node.vname == name:
            node.vparent, node.vname = None, ""
        parent.mtime_ns = parent.ctime_ns = time.time_ns()
        return node

    def rmdir(self, path: str) -> int:
        with self._mutex:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT)
            if not node.is_dir:
                raise _err(errno.ENOTDIR)
            if node.entries:
                raise _err(errno.ENOTEMPTY)
            self._unlink(parent, name)
            self.journal.append(("rmdir", parent, name, node))
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT)
            if node.is_dir:
                raise _err(errno.EISDIR)
            self._unlink(parent, name)
            self.journal.append(("unlink", parent, name, node))
        return 0

    def link(self, target: str, source: str) -> int:
        """A hard link: the new name ``target`` for the existing file ``source``."""
        with self._mutex:
            node = self._lookup(source)
            if node.is_dir:
                raise _err(errno.EPERM)
            parent, name = self._parent(target)
            if name in parent.entries:
                raise _err(errno.EEXIST)
            self._link(parent, name, node)
            node.nlink += 1
            self.journal.append(("link", parent, name, node))
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            sparent, sname = self._parent(old)
            tparent, tname = self._parent(new)
            node = sparent.entries.get(sname)
            if node is None:
                raise _err(errno.ENOENT)
            if sparent is tparent and sname == tname:
                return 0
            ancestor: Inode | None = tparent
            while ancestor is not None:  # no directory into its own subtree
                if ancestor is node:
                    raise _err(errno.EINVAL)
                ancestor = ancestor.vparent
            replaced = tparent.entries.get(tname)
            if replaced is node:
                return 0  # two names of one file: POSIX says do nothing
            if replaced is not None:
                if replaced.is_dir and not node.is_dir:
                    raise _err(errno.EISDIR)
                if node.is_dir and not replaced.is_dir:
                    raise _err(errno.ENOTDIR)
                if replaced.entries:
                    raise _err(errno.ENOTEMPTY)
                self._unlink(tparent, tname)
            self._unlink(sparent, sname)
            self._link(tparent, tname, node)
            node.nlink += 1  # _unlink took one, _link gives none
            self.journal.append(("rename", sparent, sname, tparent, tname, node, replaced))
        return 0

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self._mutex:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = Inode(self._new_ino(), False, stat.S_IFREG | (mode & 0o7777))
                self._link(parent, name, node)
                self.journal.append(("create", parent, name, node))
            elif node.is_dir:
                raise _err(errno.EISDIR)
            elif flags & os.O_TRUNC:
                self._truncate(node, 0)
            return self._open_handle(node)

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            node = self._lookup(path)
            if node.is_dir:
                raise _err(errno.EISDIR)
            if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
                self._truncate(node, 0)
            return self._open_handle(node)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            return self._read(self._handle(fh), size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            node = self._handle(fh)
            self.counters["writes"] += 1
            return self._write(node, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            node = self._handle(fh) if fh else self._node(path, None)
            self._truncate(node, length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mutex:
            node = self._handle(fh)
            if mode & ~FALLOC_FL_KEEP_SIZE:
                raise _err(errno.EOPNOTSUPP)
            if not mode & FALLOC_FL_KEEP_SIZE and offset + size > node.size:
                node.size = offset + size
                node.mtime_ns = node.ctime_ns = time.time_ns()
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            node = self._handle(fh)
            self.counters["fsyncs"] += 1
            self._sync_file(node, bool(datasync))
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self._mutex:
            self._release(fh)
        return 0

    def chmod(self, path: str | None, mode: int) -> int:
        with self._mutex:
            node = self._lookup(path or "/")
            node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)  # S_IFMT is a function
            node.ctime_ns = time.time_ns()
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        with self._mutex:
            node = self._lookup(path or "/")
            if uid != -1 and uid != 0xFFFFFFFF:
                node.uid = uid
            if gid != -1 and gid != 0xFFFFFFFF:
                node.gid = gid
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        with self._mutex:
            node = self._lookup(path or "/")
            now = time.time_ns()
            node.atime_ns, node.mtime_ns = times if times else (now, now)
        return 0


# ---- the daemon ---------------------------------------------------------------------------


def _serve_control(ops: PowerOps, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for raw in stream:
                command = raw.decode().strip()
                try:
                    if command == "cut":
                        ops.cut()
                        reply = "ok"
                    elif command == "sync":
                        ops.sync_all()
                        reply = "ok"
                    elif command == "commit-names":
                        ops.commit_names()
                        reply = "ok"
                    elif command == "pending":
                        reply = json.dumps(ops.pending())
                    elif command == "stats":
                        reply = json.dumps(ops.stats())
                    elif command == "ping":
                        reply = "pong"
                    else:
                        reply = f"error unknown command {command!r}"
                except Exception as exc:  # reported to the caller, the daemon goes on
                    log.exception("control command %s", command)
                    reply = f"error {exc!r}"
                stream.write(reply.encode() + b"\n")
                stream.flush()

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, name="powerfs-control", daemon=True).start()


def _serve_signal(ops: PowerOps) -> None:
    def wait() -> None:
        while True:
            signal.sigwait({signal.SIGUSR1})
            log.warning("SIGUSR1: power cut")
            ops.cut()

    threading.Thread(target=wait, name="powerfs-sigusr1", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.powerfs", description=__doc__)
    parser.add_argument("backing", help="real directory holding the durable state")
    parser.add_argument("mountpoint")
    parser.add_argument(
        "--control",
        help="unix socket taking the lines cut, sync, commit-names, stats, pending, ping",
    )
    parser.add_argument(
        "--no-backing-sync",
        action="store_true",
        help="do not fsync BACKING itself (the simulation is the same; faster)",
    )
    parser.add_argument("--debug", action="store_true", help="libfuse debug output")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="powerfs %(levelname)s %(message)s")

    import mfusepy  # here, not at the top: tests import this module without a libfuse

    class _FUSE(mfusepy.FUSE):
        # mfusepy drops libfuse 3's file handle on truncate: ftruncate of an unlinked file
        # (path NULL) needs it.
        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            fh = fip.contents.fh if fip else None
            decoded = None if path is None else path.decode(self.encoding, self.errors)
            return self.operations.truncate(decoded, length, fh)

    ops = PowerOps(args.backing, backing_sync=not args.no_backing_sync)
    # SIGUSR1 is taken by a sigwait thread: blocked here, before libfuse starts its workers.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    _serve_signal(ops)
    if args.control:
        _serve_control(ops, args.control)
    _FUSE(
        ops,
        args.mountpoint,
        foreground=True,
        debug=args.debug,
        fsname="powerfs",
        subtype="powerfs",
    )
    return 0


# ---- the Python API for tests ---------------------------------------------------------------


class MountError(RuntimeError):
    """The daemon could not mount (no /dev/fuse, no libfuse 3, no mfusepy, not allowed...)."""


class PowerFS:
    """A powerfs daemon in a subprocess: ``with PowerFS(backing, mnt) as fs: ...; fs.cut()``."""

    def __init__(
        self,
        backing: Path | str,
        mountpoint: Path | str,
        control: Path | str | None = None,
        backing_sync: bool = True,
    ) -> None:
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.control = (
            Path(control)
            if control
            else self.backing.parent / (self.backing.name + ".powerfs.sock")
        )
        self.backing_sync = backing_sync
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.backing.parent / (self.backing.name + ".powerfs.log")

    def start(self, timeout: float = 15.0) -> PowerFS:
        if not os.path.exists("/dev/fuse"):
            raise MountError("/dev/fuse is missing (modprobe fuse; in a container: --device)")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "tests.fault.powerfs",
            str(self.backing), str(self.mountpoint), "--control", str(self.control),
        ]  # fmt: skip
        if not self.backing_sync:
            cmd.append("--no-backing-sync")
        repo = Path(__file__).resolve().parents[2]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=repo, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MountError(
                    f"powerfs exited with {self.proc.returncode}: "
                    + self.log_path.read_text(errors="replace").strip()[-2000:]
                )
            if os.path.ismount(self.mountpoint) and self.control.exists():
                with contextlib.suppress(OSError):
                    if self._command("ping") == "pong":
                        return self
            time.sleep(0.02)
        self._kill()
        raise MountError(f"powerfs did not mount {self.mountpoint} within {timeout}s")

    def _command(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(str(self.control))
            sock.sendall(command.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                more = sock.recv(65536)
                if not more:
                    break
                reply += more
        text = reply.decode().strip()
        if text.startswith("error"):
            raise RuntimeError(f"powerfs {command}: {text}")
        return text

    def cut(self) -> None:
        """Power loss: everything not durable is gone. Close your files first."""
        self._command("cut")

    def sync(self) -> None:
        """Make everything durable (sync(1))."""
        self._command("sync")

    def commit_names(self) -> None:
        """Make every pending create/link/rename/unlink/mkdir durable, not the data."""
        self._command("commit-names")

    def stats(self) -> dict[str, Any]:
        return dict(json.loads(self._command("stats")))

    def pending(self) -> dict[str, Any]:
        """What a cut would drop now: journal operations and files with unsynced data."""
        return dict(json.loads(self._command("pending")))

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._in_mount_table():  # also a dead daemon's mount ("not connected")
            subprocess.run(["umount", "-l", str(self.mountpoint)], check=False)

    def _in_mount_table(self) -> bool:
        target = os.path.abspath(self.mountpoint)
        with open("/proc/self/mounts") as mounts:
            return any(line.split()[1] == target for line in mounts if line.strip())

    def stop(self, timeout: float = 15.0) -> None:
        """Clean unmount (commits what is pending, as a real unmount does)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            umount = shutil.which("fusermount3")
            cmd = (
                [umount, "-u", str(self.mountpoint)] if umount else ["umount", str(self.mountpoint)]
            )
            if subprocess.run(cmd, check=False, capture_output=True).returncode != 0:
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self._kill()
        self.proc = None

    def __enter__(self) -> PowerFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def mounted(base: Path, **kwargs: Any) -> Iterator[PowerFS]:
    """A powerfs over ``base/backing`` mounted at ``base/mnt``."""
    fs = PowerFS(base / "backing", base / "mnt", **kwargs)
    with fs:
        yield fs


if __name__ == "__main__":
    sys.exit(main())
