"""A power-loss campaign (issue 36): one broker on powerfs, producers under load, many cuts.

    python -m tests.fault.power_campaign [--cuts 50] [--flush SYNC_FLUSH|ASYNC_FLUSH]
                                         [--seconds-between 0.5-2] [--seed N] [--workdir DIR]
    python -m tests.fault.power_campaign --sync-master [--cuts 10] [--seconds-between 2-4] ...

A powerfs (tests/fault/powerfs.py) is mounted; one broker runs with its store on the mount
(``broker.toml`` and ``broker.log`` off it; 1 MiB commit log segments, maxMessageSize 256 KiB),
and a few SDK producers send unique, incompressible bodies of 0.2-16 KiB (one in a hundred of
64-240 KiB) to auto-created topic ``PowerCampaign``, each send recorded in a
``tests.fault.checker.History``: ``ok`` only when ``send()`` returned SEND_OK (with the queue
and offset it gave), ``unknown`` otherwise (an error, or another status such as
FLUSH_DISK_TIMEOUT: maybe written). The producers make one attempt per send
(``retry_times=0``): a retried send whose first attempt was written would be a duplicate the
campaign did not cause.

Each cycle waits a random time (``--seconds-between``), then loses power:

1. **SIGKILL the broker, then cut at once.** Kill first: a real power loss stops the process and
   drops the volatile cache in the same instant. Once the process is dead nothing touches the
   mount until the cut (the cut follows in the same event-loop step, without yielding), so the
   durable state after the cut is exactly the one at the instant of the kill. The other order
   (cut first) would leave the broker running for a moment on a mount whose handles fail with
   EIO: a world no power loss produces (a dead machine answers no client), and one in which the
   broker could even answer clients about a state it can no longer write. The dirty pages the
   kernel writes back when the killed process's maps are torn down land in powerfs as unsynced
   writes: the cut drops them, as it must.
2. **A new boot id.** A powerfs cut keeps the machine's boot id, so the restarted store would
   take it for a process crash (page cache survived, mmap writes trusted). ``wharf.store.paths``
   has no environment variable or hook for the boot id (it reads
   ``/proc/sys/kernel/random/boot_id``, and the broker is a subprocess), so the campaign rewrites
   the abort marker's recorded boot id through the mount (``<store>/abort``: new content,
   fsync, directory fsync) with an id no boot ever had: recovery then takes the machine-crash
   path, as after a real power loss and reboot.
3. Restart the broker on the mount, wait until it is ready (the restart time is reported), and
   let the producers reconnect to it. A start that fails (the broker exits before it is ready)
   is a violation of its own, counted as a *failed restart* with the broker's last log line;
   the campaign then starts it again (a process restart: no new cut, no new boot id), up to
   three attempts.

After the last cut (and restart) the producers stop, every queue of the topic is read from
offset 0 with a PullConsumer, and ``checker.check`` judges the history. Besides the checker's
findings the campaign counts **corrupted** messages: a body read back that is not exactly what
was sent for the id it carries (or that carries no id the campaign sent).

Under SYNC_FLUSH any lost acknowledged message, misplaced, duplicated, conflicting offset or
corrupted body is a violation (exit status 1). Under ASYNC_FLUSH the store promises less: the
flush service flushes every ``flushIntervalCommitLog`` (500 ms) once
``flushCommitLogLeastPages`` (4 pages) are dirty, so what was acknowledged in the last ~0.5 s
before a cut may be lost (and its offsets reused after the restart: conflicting offsets that
such an allowed loss explains are not violations). A message acknowledged more than
``--async-window`` (0.5 s) before the cut that took it, and lost, is a violation; the campaign
prints the loss per cut with the age of the oldest message lost.

``--sync-master``: a controller-mode group instead of one broker: etcd, a NameServer and
broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH, a 3 s lease) on 127.0.0.1, each replica's
store on a powerfs of its own. The producers go through the NameServer (they follow the
failovers), a consumer pulls and commits meanwhile (its reads are in the history: a read of a
message the group later gave up shows as a conflicting offset). Each cycle waits until both
replicas are in the sync-state set, cuts the master's power as above (SIGKILL + cut + a new
boot id), waits for the other replica to be routed as master, restarts the old master, which
must rejoin as a replica (both in sync again, the new master still master). At the end every
queue is read from both replicas: besides the checker's findings (lost, misplaced, duplicated,
conflicting offsets, offsets moved back, corrupted bodies, failed restarts), a queue offset
whose message differs between the two copies is a violation. The table gives, per cut, the
election, restart and rejoin times and what the cut dropped (powerfs ``pending``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fault.checker import OK, UNKNOWN, History, Read, Report, Send, check
from tests.fault.powerfs import PowerFS

TOPIC = "PowerCampaign"
BROKER = "broker-a"
PRODUCERS = 3
SENDERS_PER_PRODUCER = 2
SYNC_FLUSH, ASYNC_FLUSH = "SYNC_FLUSH", "ASYNC_FLUSH"
MAX_START_ATTEMPTS = 3


# ---- bodies ----------------------------------------------------------------------------------


def body_of(id: str, size: int) -> bytes:
    """``<id>:<size>:`` then ``size`` incompressible bytes derived from the id."""
    return f"{id}:{size}:".encode() + hashlib.shake_128(id.encode()).digest(size)


def id_of(body: bytes) -> tuple[str, bool]:
    """The id a body carries and whether the body is exactly the one sent for it."""
    head = body[:80].split(b":", 2)
    if len(head) < 3:
        return "", False
    try:
        id, size = head[0].decode(), int(head[1])
    except ValueError:
        return "", False
    return id, body == body_of(id, size)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_boot_id(abort: Path) -> bool:
    """Give the abort marker a boot id no boot had (durably, through the mount): the restart
    then recovers as after a machine crash. False when there is no marker."""
    if not abort.exists():
        return False
    fd = os.open(abort, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, f"power-campaign-{uuid.uuid4()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(abort.parent)
    return True


# ---- the campaign ----------------------------------------------------------------------------


@dataclass
class Cut:
    number: int
    at: float  # monotonic time of the kill + cut
    restart_s: float = 0.0  # the start that succeeded: from the launch until ready
    boot_id_rewritten: bool = False
    failed_starts: list[str] = field(default_factory=list)  # why each failed start failed


@dataclass
class GroupCut(Cut):
    """--sync-master: a power cut of the group's master (replica ids 1 and 2)."""

    old: int = 0  # the master whose power was cut
    new: int = 0  # the replica elected in its place
    elected_s: float = 0.0  # from the cut until the NameServer routed writes to ``new``
    rejoined_s: float = 0.0  # from the old master's restart until the sync-state set held both
    dropped: str = ""  # what the cut dropped (powerfs pending: journal ops, unsynced files)
    pending: dict[str, Any] = field(default_factory=dict)  # the same, in full


@dataclass
class Result:
    flush: str
    cuts: list[Cut]
    report: Report
    corrupted: list[str]
    history: History
    async_window: float
    seed: int
    seconds: float = 0.0
    # ASYNC_FLUSH: per cut, (acknowledged before it since the previous cut, lost, oldest age).
    per_cut: list[tuple[int, int, int, float]] = field(default_factory=list)
    old_losses: list[str] = field(default_factory=list)  # lost beyond the window (ASYNC)
    unexplained_conflicts: list[str] = field(default_factory=list)
    # --sync-master: a controller-mode group, each cut its master's (``GroupCut``s).
    group: bool = False
    replica_mismatches: list[str] = field(default_factory=list)  # replica copy != master's

    @property
    def failed_starts(self) -> list[str]:
        return [f"after cut {c.number}: {why}" for c in self.cuts for why in c.failed_starts]

    @property
    def restart_times(self) -> list[float]:
        return [c.restart_s for c in self.cuts]

    @property
    def violations(self) -> dict[str, int]:
        r = self.report
        found = {
            "misplaced": len(r.misplaced),
            "duplicated": len(r.duplicated),
            "corrupted": len(self.corrupted),
            "offsets moved back": len(r.offsets_moved_back),
            "failed restarts": len(self.failed_starts),
            "replica copies differing": len(self.replica_mismatches),
        }
        if self.flush == SYNC_FLUSH:
            found["lost"] = len(r.lost)
            found["conflicting offsets"] = len(r.conflicting_offsets)
        else:
            found["lost beyond the window"] = len(self.old_losses)
            found["conflicting offsets not explained by an allowed loss"] = len(
                self.unexplained_conflicts
            )
        return {k: v for k, v in found.items() if v}

    @property
    def ok(self) -> bool:
        return not self.violations

    def table(self) -> str:
        r, times = self.report, self.restart_times or [0.0]
        rows: list[tuple[str, object]] = [
            ("mode", "SYNC_MASTER group (2 replicas, etcd)" if self.group else "one broker"),
            ("flush", self.flush),
            ("seed", self.seed),
            ("cuts", len(self.cuts)),
            ("duration", f"{self.seconds:.0f} s"),
            ("operations", r.operations),
            ("sends", r.sends),
            ("acknowledged", r.acknowledged),
            ("unknown (written anyway)", f"{r.unknown} ({r.unknown_written})"),
            ("failed (written anyway)", f"{r.failed} ({r.failed_written})"),
            ("read back", r.read),
            ("lost (acknowledged)", len(r.lost)),
            ("misplaced", len(r.misplaced)),
            ("duplicated", len(r.duplicated)),
            ("conflicting offsets", len(r.conflicting_offsets)),
            ("corrupted", len(self.corrupted)),
            ("offsets moved back", len(r.offsets_moved_back)),
            ("restart p50 / max", f"{statistics.median(times):.2f} s / {max(times):.2f} s"),
            ("failed restarts", len(self.failed_starts)),
        ]
        if self.group:
            cuts = [c for c in self.cuts if isinstance(c, GroupCut)] or [GroupCut(0, 0.0)]
            elected = [c.elected_s for c in cuts]
            rejoined = [c.rejoined_s for c in cuts]
            rows += [
                ("elected p50 / max",
                 f"{statistics.median(elected):.2f} s / {max(elected):.2f} s"),
                ("rejoined p50 / max",
                 f"{statistics.median(rejoined):.2f} s / {max(rejoined):.2f} s"),
                ("replica copies differing", len(self.replica_mismatches)),
            ]  # fmt: skip
        if self.flush == ASYNC_FLUSH:
            rows += [
                (f"lost older than {self.async_window:.1f} s", len(self.old_losses)),
                ("conflicts not explained", len(self.unexplained_conflicts)),
            ]
        rows.append(("verdict", "OK" if self.ok else f"VIOLATIONS {self.violations}"))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        if self.group and self.cuts:
            lines += ["", "cut  master  elected  restart  in sync  the cut dropped"]
            lines += [
                f"{c.number:>3}  a{c.old}->a{c.new}  {c.elected_s:>5.2f} s  {c.restart_s:>5.2f} s  "
                f"{c.rejoined_s:>5.2f} s  {c.dropped}"
                for c in self.cuts
                if isinstance(c, GroupCut)
            ]
        if self.flush == ASYNC_FLUSH and self.per_cut:
            lines += ["", "cut  acked-since-previous  lost  oldest-lost-age"]
            lines += [
                f"{n:>3}  {acked:>20}  {lost:>4}  {age * 1000:>12.0f} ms" if lost else
                f"{n:>3}  {acked:>20}  {lost:>4}  {'-':>15}"
                for n, acked, lost, age in self.per_cut
            ]  # fmt: skip
        examples = [
            *(f"lost: {v}" for v in r.lost[:5]),
            *(f"misplaced: {v}" for v in r.misplaced[:5]),
            *(f"duplicated: {v}" for v in r.duplicated[:5]),
            *(f"conflicting: {v}" for v in r.conflicting_offsets[:5]),
            *(f"corrupted: {v}" for v in self.corrupted[:5]),
            *(f"lost beyond the window: {v}" for v in self.old_losses[:5]),
            *(f"failed restart {v}" for v in self.failed_starts[:5]),
            *(f"replica differs: {v}" for v in self.replica_mismatches[:5]),
        ]
        if examples:
            lines += ["", *examples]
        return "\n".join(lines)


class _Load:
    """Producers sending to whichever broker incarnation is up (``epoch``)."""

    def __init__(self, history: History, rng: random.Random) -> None:
        self.history = history
        self.rng = rng
        self.endpoint = ""
        self.epoch = 0
        self.up = asyncio.Event()
        self.done = False
        self.seq = 0
        self.pause = 0.0  # seconds each sender waits after a send (0: none)

    def next_message(self, producer: int) -> tuple[str, bytes]:
        self.seq += 1
        id = f"p{producer}-{self.seq:07d}"
        big = self.rng.random() < 0.01
        size = self.rng.randint(64 << 10, 240 << 10) if big else self.rng.randint(200, 16 << 10)
        return id, body_of(id, size)

    async def producer(self, n: int) -> None:
        from wharf.client import Producer

        while not self.done:
            await self.up.wait()
            if self.done:
                return
            epoch, endpoint = self.epoch, self.endpoint
            producer = Producer(endpoint, retry_times=0, send_timeout=5.0)
            try:
                await producer.start()
                senders = (self._sender(producer, epoch, n) for _ in range(SENDERS_PER_PRODUCER))
                await asyncio.gather(*senders)
            except Exception:
                await asyncio.sleep(0.1)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.close(), 5)

    async def _sender(self, producer: Any, epoch: int, n: int) -> None:
        from wharf.client.message import SendStatus

        while not self.done and self.epoch == epoch:
            id, body = self.next_message(n)
            digest = hashlib.sha1(body).hexdigest()[:16]
            op = self.history.send_started(id, digest)
            try:
                result = await producer.send(TOPIC, body)
            except Exception as exc:  # maybe written: the broker died mid-send
                self.history.send_done(op, UNKNOWN, f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                self.history.send_done(
                    op, OK, broker=BROKER, queue=result.queue_id,
                    offset=result.queue_offset,
                )  # fmt: skip
            else:
                self.history.send_done(op, UNKNOWN, result.status.name)
            if self.pause:
                await asyncio.sleep(self.pause)


async def _read_everything(endpoint: str) -> tuple[list[Read], list[str]]:
    from wharf.client import PullConsumer

    reads: list[Read] = []
    corrupted: list[str] = []
    async with PullConsumer(endpoint, "power-campaign-check") as consumer:
        for queue in await consumer.queues(TOPIC):
            _, high = await consumer.bounds(queue)
            offset = 0
            while offset < high:
                result = await consumer.pull(queue, offset, max_wait_ms=0)
                for message in result.messages:
                    id, exact = id_of(message.body)
                    where = f"{BROKER}/{queue.queue_id}@{message.queue_offset}"
                    if not exact:
                        corrupted.append(f"{where}: {len(message.body)} bytes, id {id!r}")
                    reads.append(Read(BROKER, queue.queue_id, message.queue_offset, id or where))
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
    return reads, corrupted


async def _restart(broker: Any, cut: Cut, log: Any) -> None:
    """Start ``broker`` again after ``cut`` (``cut.restart_s``: the start that succeeded). A
    start that fails is a violation of its own (counted, with the broker's last words); the
    next attempt is a process restart, as an operator's, up to MAX_START_ATTEMPTS."""
    while True:
        started = time.monotonic()
        try:
            await asyncio.to_thread(broker.start)
            break
        except RuntimeError as exc:
            tail = broker.log().strip().splitlines()[-1:]
            cut.failed_starts.append(f"{str(exc).splitlines()[0]} {tail}")
            log(f"cut {cut.number}: the broker did not restart: {cut.failed_starts[-1]}")
            if len(cut.failed_starts) >= MAX_START_ATTEMPTS:
                raise RuntimeError(
                    f"the broker did not restart after cut {cut.number} "
                    f"({MAX_START_ATTEMPTS} attempts): {exc}\n{broker.log()[-4000:]}"
                ) from exc
    cut.restart_s = time.monotonic() - started


async def _campaign(
    fs: PowerFS,
    root: Path,
    cuts: int,
    flush: str,
    between: tuple[float, float],
    rng: random.Random,
    log: Any,
) -> tuple[History, list[Cut], list[Read], list[str]]:
    store = fs.mountpoint / "store"
    settings = {
        "flushDiskType": flush,
        "mappedFileSizeCommitLog": 1024 * 1024,
        "maxMessageSize": 256 * 1024,
    }
    from tests.harness import BrokerProcess  # launches with no preexec_fn (safe beside gRPC)

    broker = BrokerProcess(root, settings=settings, ready_timeout=90)
    await asyncio.to_thread(broker.start)
    history = History()
    load = _Load(history, rng)
    load.endpoint, load.epoch = broker.endpoint, 1
    load.up.set()
    workers = [asyncio.create_task(load.producer(n)) for n in range(PRODUCERS)]
    done: list[Cut] = []
    try:
        for number in range(1, cuts + 1):
            await asyncio.sleep(rng.uniform(*between))
            # Power loss: no await between the kill and the cut (see the module docstring).
            load.up.clear()
            load.epoch += 1
            at = time.monotonic()
            broker.kill()
            fs.cut()
            cut = Cut(number, at, boot_id_rewritten=new_boot_id(store / "abort"))
            history.fault(f"power cut {number}").end = at
            await _restart(broker, cut, log)
            done.append(cut)
            acked = sum(isinstance(op, Send) and op.status == OK for op in history.ops)
            log(
                f"cut {number}/{cuts}: restart {cut.restart_s:.2f} s, "
                f"{acked} acknowledged so far"
                + ("" if cut.boot_id_rewritten else " (no abort marker to rewrite!)")
            )
            load.endpoint = broker.endpoint
            load.up.set()
        load.done = True
        load.up.set()
        await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), 30)
        reads, corrupted = await _read_everything(broker.endpoint)
    finally:
        load.done = True
        load.up.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        try:
            await asyncio.to_thread(broker.stop)
        except Exception:
            broker.kill()
    return history, done, reads, corrupted


def _judge_async(result: Result, final: list[Read]) -> None:
    """ASYNC_FLUSH: attribute each lost acknowledged send to the first cut after its ack."""
    lost_ids = {line.split(":", 1)[0] for line in result.report.lost}
    sends = [op for op in result.history.ops if isinstance(op, Send) and op.status == OK]
    cut_times = [c.at for c in result.cuts]
    per_cut: dict[int, list[float]] = {c.number: [] for c in result.cuts}
    acked: dict[int, int] = {c.number: 0 for c in result.cuts}
    for s in sends:
        # The cut that could take it: the first one at or after its start (the ack may have
        # been processed after the kill that followed it).
        i = next((k for k, t in enumerate(cut_times) if t >= s.start), None)
        if i is None:
            continue  # sent after the last cut: read back or the checker says lost anyway
        number = result.cuts[i].number
        acked[number] += 1
        if s.id in lost_ids:
            age = max(0.0, cut_times[i] - s.end)
            per_cut[number].append(age)
            if age > result.async_window:
                result.old_losses.append(
                    f"{s.id}: acknowledged {age:.3f} s before cut {number} "
                    f"at {s.broker}/{s.queue}@{s.offset}, lost"
                )
    for s in sends:  # lost after the last cut: no cut explains it
        if s.id in lost_ids and s.start > (cut_times[-1] if cut_times else 0):
            result.old_losses.append(f"{s.id}: acknowledged after the last cut, lost")
    result.per_cut = [
        (n, acked[n], len(ages), max(ages) if ages else 0.0) for n, ages in per_cut.items()
    ]
    for line in result.report.conflicting_offsets:
        ids = [part.strip().split(" ", 1)[0] for part in line.split(": ", 1)[1].split(";")]
        if not any(id in lost_ids for id in ids):
            result.unexplained_conflicts.append(line)


def run_campaign(
    workdir: Path,
    cuts: int = 50,
    flush: str = SYNC_FLUSH,
    between: tuple[float, float] = (0.5, 2.0),
    seed: int | None = None,
    async_window: float = 0.5,
    log: Any = print,
) -> Result:
    """Mount powerfs under ``workdir`` (raises ``powerfs.MountError`` when FUSE is unusable),
    run the campaign, unmount; the result holds the report."""
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    began = time.monotonic()
    fs = PowerFS(workdir / "backing", workdir / "mnt", backing_sync=True)
    fs.start()
    try:
        store, root = fs.mountpoint / "store", workdir / "broker"
        store.mkdir()
        fsync_dir(fs.mountpoint)  # the store's root is the campaign's: durable from the start
        root.mkdir(parents=True, exist_ok=True)
        (root / "store").symlink_to(store)  # broker.toml and broker.log off the mount
        history, done, final, corrupted = asyncio.run(
            _campaign(fs, root, cuts, flush, between, rng, log)
        )
    finally:
        with contextlib.suppress(Exception):
            fs.stop()
    report = check(history.ops, final)
    result = Result(flush, done, report, corrupted, history, async_window, seed)
    result.seconds = time.monotonic() - began
    if flush == ASYNC_FLUSH:
        _judge_async(result, final)
    return result


# ---- --sync-master: power cuts of a controller-mode group's master ---------------------------

GROUP_TTL_MS = 3000  # controllerHeartBeatTimeoutMills: the master's lease in etcd
LIVE_GROUP = "power-campaign-live"


class _GroupLoad(_Load):
    """Producers through the NameServer (they follow the failovers on their own) and a consumer
    pulling and committing during the run, its reads recorded (a read of a message the group
    later gives up, whose offset then holds another, is a conflicting offset)."""

    def __init__(self, history: History, rng: random.Random, namesrv: str) -> None:
        super().__init__(history, rng)
        self.namesrv = namesrv

    async def producer(self, n: int) -> None:
        from wharf.client import Producer

        while not self.done:
            producer = Producer(namesrv=self.namesrv, retry_times=0, send_timeout=5.0)
            try:
                await producer.start()
                senders = (self._sender(producer, 0, n) for _ in range(SENDERS_PER_PRODUCER))
                await asyncio.gather(*senders)
            except Exception:
                await asyncio.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.close(), 5)

    async def consumer(self) -> None:
        from wharf.client import PullConsumer

        positions: dict[Any, int] = {}
        while not self.done:
            try:
                async with PullConsumer(namesrv=self.namesrv, group=LIVE_GROUP) as consumer:
                    while not self.done:
                        if not positions:
                            positions = dict.fromkeys(await consumer.queues(TOPIC), 0)
                        for queue, offset in positions.items():
                            result = await consumer.pull(queue, offset, max_messages=64)
                            for m in result.messages:
                                id, _ = id_of(m.body)
                                self.history.read(BROKER, queue.queue_id, m.queue_offset,
                                                  id or f"?{m.queue_offset}")  # fmt: skip
                            if result.messages:
                                positions[queue] = result.next_begin_offset
                                op = self.history.commit(LIVE_GROUP, BROKER, queue.queue_id,
                                                         positions[queue], status=UNKNOWN)  # fmt: skip
                                await consumer.commit(queue, positions[queue])
                                op.status = OK
                        await asyncio.sleep(0.05)
            except Exception:
                await asyncio.sleep(0.2)


async def _highs(endpoint: str) -> dict[int, int]:
    """Queue id -> max offset of the topic on one broker."""
    from wharf.client import PullConsumer

    async with PullConsumer(endpoint, "power-campaign-check") as consumer:
        return {q.queue_id: (await consumer.bounds(q))[1] for q in await consumer.queues(TOPIC)}


async def _caught_up(master: str, replica: str, within_s: float = 30.0) -> dict[int, int]:
    """Once the replica holds every queue up to the master's max offset: those offsets."""
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(Exception):
            highs = await _highs(master)
            if await _highs(replica) == highs:
                return highs
        if time.monotonic() > deadline:
            raise AssertionError(f"the replica {replica} never caught up with {master}")
        await asyncio.sleep(0.2)


async def _group_campaign(
    mounts: dict[int, PowerFS],
    root: Path,
    cuts: int,
    between: tuple[float, float],
    rng: random.Random,
    log: Any,
    producers: int,
    pause: float,
) -> tuple[History, list[Cut], list[Read], list[str], list[str]]:
    from tests.cluster.failover_helpers import Group, create_topic

    for i, fs in mounts.items():  # broker.toml and broker.log off the mount, the store on it
        (root / f"a{i}").mkdir(parents=True, exist_ok=True)
        (root / f"a{i}" / "store").symlink_to(fs.mountpoint / "store")
    settings = {"mappedFileSizeCommitLog": 1024 * 1024, "maxMessageSize": 256 * 1024}
    group = await asyncio.to_thread(
        Group, root, ttl_ms=GROUP_TTL_MS, other=False, settings=settings
    )
    ids = {broker.endpoint: i for i, broker in group.replicas.items()}
    history = History()
    load = _GroupLoad(history, rng, group.ns.endpoint)
    load.pause = pause
    workers: list[asyncio.Task[None]] = []
    done: list[Cut] = []
    try:
        master = await group.master(within_s=30)
        await create_topic(group, master, TOPIC)
        await group.in_sync(master, within_s=30)
        workers = [asyncio.create_task(load.producer(n)) for n in range(producers)]
        workers.append(asyncio.create_task(load.consumer()))
        for number in range(1, cuts + 1):
            await asyncio.sleep(rng.uniform(*between))
            old = await group.master()
            await group.in_sync(old, within_s=60)  # the replica can be elected
            cut = GroupCut(number, 0.0, old=ids[old.endpoint])
            fs = mounts[cut.old]
            # Power loss of the master's machine: no await between the kill and the cut.
            cut.at = time.monotonic()
            old.kill()
            pending = fs.pending()  # the broker is dead: nothing changes the mount meanwhile
            fs.cut()
            cut.pending = pending
            cut.dropped = (
                f"{len(pending['journal'])} name ops, {len(pending['unsynced_files'])} files"
            )
            cut.boot_id_rewritten = new_boot_id(fs.mountpoint / "store" / "abort")
            history.fault(f"power cut {number} of master a{cut.old}").end = cut.at
            new = await group.master(within_s=GROUP_TTL_MS / 1000 + 30, other_than=old)
            cut.new, cut.elected_s = ids[new.endpoint], time.monotonic() - cut.at
            await _restart(old, cut, log)  # it must come back as a replica of ``new``
            await group.in_sync(new, within_s=60)
            cut.rejoined_s = time.monotonic() - cut.at - cut.elected_s - cut.restart_s
            if (now := await group.master()) is not new:
                raise AssertionError(f"a{cut.old} took the group back from a{cut.new}: {now}")
            done.append(cut)
            acked = sum(isinstance(op, Send) and op.status == OK for op in history.ops)
            log(
                f"cut {number}/{cuts}: master a{cut.old} cut, a{cut.new} elected after "
                f"{cut.elected_s:.2f} s; a{cut.old} restarted in {cut.restart_s:.2f} s and "
                f"in sync {cut.rejoined_s:.2f} s later; {acked} acknowledged so far; "
                f"the cut dropped {cut.dropped}: {cut.pending}"
                + ("" if cut.boot_id_rewritten else " (no abort marker to rewrite!)")
            )
        await asyncio.sleep(rng.uniform(*between))  # the restarted replica under load
        load.done = True
        await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), 30)
        master = await group.master()
        replica = next(b for b in group.replicas.values() if b is not master)
        await _caught_up(master.endpoint, replica.endpoint)
        reads, corrupted = await _read_everything(master.endpoint)
        copy, corrupted_copy = await _read_everything(replica.endpoint)
    except BaseException:
        log(
            "\n".join(
                f"--- a{i} ---\n" + "\n".join(b.log().splitlines()[-40:])
                for i, b in group.replicas.items()
            )
        )
        raise
    finally:
        load.done = True
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        group.kill_all()
    corrupted += [f"replica a{ids[replica.endpoint]}: {c}" for c in corrupted_copy]
    held = {(r.queue, r.offset): r.id for r in reads}
    kept = {(r.queue, r.offset): r.id for r in copy}
    mismatches = [
        f"{BROKER}/{q}@{o}: master a{ids[master.endpoint]} {held.get((q, o))}, "
        f"replica a{ids[replica.endpoint]} {kept.get((q, o))}"
        for q, o in sorted(held.keys() | kept.keys())
        if held.get((q, o)) != kept.get((q, o))
    ]
    return history, done, reads, corrupted, mismatches


def run_group_campaign(
    workdir: Path,
    cuts: int = 10,
    between: tuple[float, float] = (2.0, 4.0),
    seed: int | None = None,
    log: Any = print,
    producers: int = PRODUCERS,
    pause: float = 0.0,
) -> Result:
    """SYNC_MASTER + SYNC_FLUSH: a controller-mode group (etcd, a NameServer, broker-a as two
    replicas on 127.0.0.1), each replica's store on a powerfs of its own; ``cuts`` times the
    master's power is cut (kill -9 + cut + a new boot id), the other replica must be elected
    and the old master rejoin as its replica. Raises ``powerfs.MountError`` when FUSE is
    unusable, ``AssertionError`` when the group does not fail over or the old master does not
    rejoin in time. ``producers`` (two senders each) and ``pause`` (after each send) set the
    load."""
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    began = time.monotonic()
    mounts = {i: PowerFS(workdir / f"backing{i}", workdir / f"mnt{i}") for i in (1, 2)}
    try:
        for fs in mounts.values():
            fs.start()
            (fs.mountpoint / "store").mkdir()
            fsync_dir(fs.mountpoint)  # the store's root is the campaign's: durable from the start
        history, done, final, corrupted, mismatches = asyncio.run(
            _group_campaign(mounts, workdir / "group", cuts, between, rng, log, producers, pause)
        )
    finally:
        for fs in mounts.values():
            with contextlib.suppress(Exception):
                fs.stop()
    report = check(history.ops, final)
    result = Result(SYNC_FLUSH, done, report, corrupted, history, 0.0, seed, group=True)
    result.replica_mismatches = mismatches
    result.seconds = time.monotonic() - began
    return result


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    return float(lo), float(hi or lo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sync-master", action="store_true",
                        help="a controller-mode SYNC_MASTER group: cut its master's power each "
                        "time (defaults: --cuts 10, --seconds-between 2-4)")  # fmt: skip
    parser.add_argument("--cuts", type=int, default=None, help="50 (--sync-master: 10)")
    parser.add_argument("--flush", choices=[SYNC_FLUSH, ASYNC_FLUSH], default=SYNC_FLUSH)
    parser.add_argument("--seconds-between", type=_range, default=None,
                        help="random wait before each cut, LO-HI seconds (0.5-2)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--async-window", type=float, default=0.5,
                        help="ASYNC_FLUSH: acknowledged this long before a cut may be lost")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where to mount (default: a new temporary directory, removed "
                        "when the campaign passes)")  # fmt: skip
    parser.add_argument("--history", type=Path, default=None, help="dump the history here")
    args = parser.parse_args(argv)
    if args.sync_master and args.flush != SYNC_FLUSH:
        parser.error("--sync-master runs SYNC_FLUSH replicas")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wharf-power-campaign-"))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.sync_master:
        result = run_group_campaign(
            workdir, args.cuts or 10, args.seconds_between or (2.0, 4.0), args.seed, log
        )
    else:
        result = run_campaign(
            workdir, args.cuts or 50, args.flush, args.seconds_between or (0.5, 2.0),
            args.seed, args.async_window, log,
        )  # fmt: skip
    if args.history:
        result.history.dump(args.history)
    print(result.table())
    if result.ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not result.ok:
        print(f"\nkept for a post-mortem: {workdir}", file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
