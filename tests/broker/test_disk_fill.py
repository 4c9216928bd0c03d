"""Fill a real filesystem under the daemon (issue 12): a tmpfs the size of a few segments.

The broker's store lives on a 12 MiB tmpfs that also holds "ballast" files. Each cycle tops the
filesystem up to 100 % with a file while the commit log still has room in its (fallocated)
segments, so the next writes that need space are the consume queue and index pages (sparse
files: a store through the map into such a page killed the broker with SIGBUS) and then the
next segment roll. A producer sends until the broker refuses; the test deletes the top-up and a
ballast file and sends until writes resume; twice. The disk guard is nearly off
(diskSpaceWarningLevelRatio 99, no forced retention), so most refusals come from ENOSPC itself.
Asserted: the broker never dies, every refusal is RESOURCE_EXHAUSTED "disk full" (before: INTERNAL
with an OSError), every acknowledged message is served, before and after a restart, nothing that
was refused is, and the broker logs no traceback.

Needs root (mount); CI runs as root. Skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from wharf.v1 import common_pb2, messaging_pb2

from tests.broker.daemon_helpers import Client
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow

FS_BYTES = 12 * 1024 * 1024
BALLAST_BYTES = 2 * 1024 * 1024
BALLAST_FILES = 3
CYCLES = 2  # fill -> refused -> free one ballast file -> writes resume, twice
SETTINGS = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 100,  # a new queue file every 100 messages
    "maxHashSlotNum": 100,
    "maxIndexNum": 400,  # a new index file every ~400 messages
    "maxMessageSize": 64 * 1024,
    "diskMaxUsedSpaceRatio": 97,
    "diskSpaceCleanForciblyRatio": 98,
    "diskSpaceWarningLevelRatio": 99,
    "cleanFileForciblyEnable": False,
    "cleanResourceInterval": 1000,
}


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Producer:
    """Sends batches with unique ids; remembers what was acknowledged, refused, or unsure."""

    def __init__(self, broker: BrokerProcess, body_size: int, batch: int) -> None:
        self.broker = broker
        self.client = Client(broker.endpoint)
        self.body_size = body_size
        self.batch = batch
        self.n = 0
        self.acked: set[str] = set()
        self.refused: set[str] = set()
        self.unsure: set[str] = set()  # e.g. FLUSH_DISK_TIMEOUT: stored, not acknowledged
        self.refusals: list[str] = []

    def body(self, uid: str) -> bytes:
        if self.body_size < 1024:  # small and compressible
            return (uid.encode() + b"-") * (self.body_size // (len(uid) + 1))
        return uid.encode() + os.urandom(self.body_size)  # large and incompressible

    def send(self) -> bool:
        """One batch; True if acknowledged, False if refused for a full disk."""
        ids = [f"m{self.n + i}" for i in range(self.batch)]
        self.n += self.batch
        request = messaging_pb2.SendMessageRequest(
            topic="fill",
            queue_id=self.n // self.batch % 2,
            messages=[common_pb2.Message(body=self.body(i), unique_id=i) for i in ids],
        )
        try:
            reply = self.client.msg.SendMessage(request, timeout=10)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""
            proc = self.broker.proc
            assert proc is not None and proc.poll() is None, (
                f"the broker died: {proc and proc.returncode}"
            )
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
            assert "disk full" in details, details
            self.refused.update(ids)
            self.refusals.append(details)
            return False
        if all(r.status == messaging_pb2.SEND_OK for r in reply.results):
            self.acked.update(ids)
            return True
        self.unsure.update(ids)
        return True

    def fill(self, deadline: float) -> None:
        while self.send():
            assert time.monotonic() < deadline, "the disk never filled"

    def resume(self, deadline: float) -> None:
        while not self.send():
            assert time.monotonic() < deadline, "writes did not resume after space was freed"
            time.sleep(0.05)


def _top_up(path: Path) -> None:
    """Fill the filesystem holding ``path`` to the last byte."""
    chunk = bytes(64 * 1024)
    with path.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass


def _served(endpoint: str) -> set[str]:
    client = Client(endpoint)
    seen: set[str] = set()
    try:
        for queue_id in range(2):
            offset = 0
            while True:
                reply = client.pull("fill", offset, queue_id=queue_id, max_messages=1024)
                if not reply.messages:
                    break
                seen.update(m.msg_id for m in reply.messages)
                offset = reply.next_begin_offset
    finally:
        client.close()
    return seen


def _wait_served(endpoint: str, expected: set[str], timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    while True:
        seen = _served(endpoint)
        if expected <= seen or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
@pytest.mark.parametrize(
    ("body_size", "batch"), [(200, 128), (3 * 1024, 16)], ids=["small", "large"]
)
def test_a_filling_disk_refuses_writes_cleanly_and_loses_nothing(
    daemons: Daemons, tmpfs: Path, tmp_path: Path, mode: str, body_size: int, batch: int
) -> None:
    ballast = []
    for i in range(BALLAST_FILES):
        path = tmpfs / f"ballast-{i}"
        path.write_bytes(bytes(BALLAST_BYTES))
        ballast.append(path)
    broker = daemons.broker(
        tmp_path / "broker", settings={**SETTINGS, "flushDiskType": mode}, start=False
    )
    broker.store_dir = tmpfs / "store"
    producer: Producer | None = None
    try:
        broker.start()
        producer = Producer(broker, body_size, batch)
        # The topic is auto-created (and topics.json written) before the disk fills: metadata
        # persistence on a full disk is not this test's subject.
        assert producer.send() and producer.send()
        time.sleep(0.5)  # topics.json is written ~50 ms after an auto-create
        deadline = time.monotonic() + 20
        for cycle in range(CYCLES):
            top_up = tmpfs / f"top-up-{cycle}"
            _top_up(top_up)
            producer.fill(deadline)
            for _ in range(3):  # stays refused, and the broker stays up
                assert not producer.send()
            assert broker.proc is not None and broker.proc.poll() is None, broker.log()
            top_up.unlink()
            ballast.pop().unlink()
            producer.resume(deadline)
            assert producer.acked, cycle
        for path in ballast:  # room for dispatch to catch up with everything acknowledged
            path.unlink()
        seen = _wait_served(broker.endpoint, producer.acked, timeout=10)
        missing = producer.acked - seen
        assert not missing, f"{len(missing)} acknowledged messages not served"
        assert not seen & producer.refused, "a refused message was served"
        assert seen <= producer.acked | producer.unsure
        log = broker.log()
        if os.environ.get("DISK_FILL_DEBUG"):
            print(log, sorted(set(producer.refusals)), len(producer.acked))
        assert "Traceback" not in log, log[-3000:]
        assert broker.stop() == 0
        broker.start()
        after = _wait_served(broker.endpoint, producer.acked, timeout=10)
        assert producer.acked <= after and not after & producer.refused
    finally:
        if producer is not None:
            producer.client.close()
        broker.kill()
