"""The one launcher of the real broker daemon, for tests and benchmarks: a subprocess on
127.0.0.1 with ephemeral ports.

    with BrokerProcess(tmp_path, settings={"flushDiskType": "SYNC_FLUSH"}) as broker:
        channel = grpc.insecure_channel(broker.endpoint)

``settings`` are RocketMQ-named TOML settings written to ``<root>/broker.toml``; the store is
``<root>/store`` and the broker's stdout and stderr go to ``<root>/broker.log``. The broker
writes ``--ready-file`` (JSON: grpc, metrics, pid) once it serves; ``start`` waits for that
file, so ``endpoint`` is the port the OS picked. With ``tlsEnable`` it also names the ``tls``
and ``plaintext`` ports (``tls_endpoint``, ``plaintext_endpoint``; ``endpoint`` is TLS-only
without ``tlsListen``). ``stop`` is a graceful SIGTERM, ``kill`` a crash (SIGKILL). A restart reuses the root, so the store survives it.
Tests get theirs from the ``daemons`` fixture (``tests/conftest.py``), which stops them all.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


# free_port hands out ports BELOW the kernel's ephemeral range: a port the kernel picked for
# ``bind(0)`` came back free, but the kernel could hand it again to any socket bound to port 0
# or connecting out (another daemon of the test, a client) before the daemon it was meant for
# bound it (a failover test lost its replica's port that way). Ports outside the range are
# never picked by the kernel; the ones handed out in this process are not handed out twice.
_FIXED_PORTS = range(20_000, 32_000)
_handed_out: set[int] = set()
# Not the ``random`` module's state: pytest-randomly seeds it alike in every test process.
_pick = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A loopback port free right now and outside the kernel's ephemeral range (for a broker
    that must keep its port across restarts, or for an address nothing listens on)."""
    low = _ephemeral_low()
    candidates = [p for p in _FIXED_PORTS if p < low and p not in _handed_out]
    for port in _pick.sample(candidates, min(len(candidates), 200)):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:  # no fixed port free (a narrowed range): the kernel's pick
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


_LIMIT_AND_EXEC = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


def _launch(
    cmd: list[str],
    env: dict[str, str],
    log_path: Path,
    ready: Path,
    timeout: float,
    what: str,
    open_files: int | None = None,
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Start a daemon with its output in ``log_path`` and wait for its ready file;
    ``open_files`` sets its open-file limit (soft and hard: the broker raises soft to hard)."""
    log = log_path.open("ab")
    if open_files is not None:
        # Set in a small exec wrapper, not with preexec_fn: that runs Python in a child forked
        # from a process with gRPC's threads, which is unsafe (it crashed a CI run).
        cmd = [sys.executable, "-c", _LIMIT_AND_EXEC, str(open_files), *cmd]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=log, stderr=log)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log_path.read_text(errors="replace")
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{text}")
        if ready.exists():
            try:
                return proc, json.loads(ready.read_text())
            except json.JSONDecodeError:  # caught mid-write
                pass
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise TimeoutError(
        f"{what} not ready after {timeout}s:\n{log_path.read_text(errors='replace')}"
    )


# Store sizes of test brokers unless a test sets its own: the defaults preallocate a 1 GiB
# commit log segment (and the next one ahead) and a 420 MB index file per broker, ~2.5 GB of
# disk each; a CI run starts a few hundred brokers (it once filled 83 GB of /tmp).
TEST_STORE_SIZES: dict[str, Any] = {
    "mappedFileSizeCommitLog": 32 * 1024 * 1024,
    "maxHashSlotNum": 50_000,
    "maxIndexNum": 200_000,
}


class BrokerProcess:
    def __init__(
        self,
        root: Path,
        settings: dict[str, Any] | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        ready_timeout: float = 30.0,
        open_files: int | None = None,
        python: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.open_files = open_files  # RLIMIT_NOFILE of the daemon (None: inherited)
        # The interpreter that runs the daemon: another revision's (tests/bench/revisions.py).
        self.python = python or sys.executable
        self.store_dir = self.root / "store"
        self.settings = {**TEST_STORE_SIZES, **(settings or {})}
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.metrics_endpoint = ""
        # With tlsEnable: the port serving TLS (= endpoint without tlsListen), and the
        # plaintext one ("" when listen is TLS-only).
        self.tls_endpoint = ""
        self.plaintext_endpoint = ""
        self.ha_endpoint = ""
        self.wire_endpoint = ""  # wire://host:port of the wire port ("" when off)
        self.remoting_endpoint = ""  # host:port of --remoting-listen, RocketMQ 4.x ("" when off)
        self.kafka_endpoint = ""  # host:port of --kafka-listen ("" when off)
        self.fronts_endpoint = ""  # host:port of the v2Fronts processes ("" when off)
        self.log_path = self.root / "broker.log"

    def start(self, timeout: float | None = None) -> BrokerProcess:
        timeout = self.ready_timeout if timeout is None else timeout
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "broker.toml"
        config.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in self.settings.items()))
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        # The wire port is ephemeral unless the test sets it: its default, the listen port + 2,
        # is a fixed port once a test fixes --listen (to keep it across restarts), and another
        # process's ephemeral socket can hold it (it did, in CI).
        wire = (
            []
            if "wireListen" in self.settings or "--wire-listen" in self.extra_args
            else ["--wire-listen", "127.0.0.1:0"]
        )
        # Remoting and Kafka are off unless the test sets them: their defaults are fixed
        # ports (10911, 9092) that parallel brokers would share.
        for setting, flag in (("remotingListen", "--remoting-listen"),
                              ("kafkaListen", "--kafka-listen")):  # fmt: skip
            if setting not in self.settings and flag not in self.extra_args:
                wire += [flag, "off"]
        cmd = [
            self.python, "-m", "wharf.broker",
            "--config", str(config),
            "--store-dir", str(self.store_dir),
            "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(ready),
            *wire,
            *self.extra_args,
        ]  # fmt: skip
        self.proc, info = _launch(
            cmd, self.env, self.log_path, ready, timeout, "broker", self.open_files
        )
        self.endpoint = info["grpc"]
        self.metrics_endpoint = info.get("metrics", "")
        self.tls_endpoint = info.get("tls") or ""
        self.plaintext_endpoint = info.get("plaintext") or ""
        self.ha_endpoint = info.get("ha") or ""  # the replication listener (haListenPort)
        self.wire_endpoint = f"wire://{info['wire']}" if info.get("wire") else ""
        self.remoting_endpoint = info.get("remoting") or ""
        self.kafka_endpoint = info.get("kafka") or ""
        self.fronts_endpoint = info.get("v2_fronts") or ""
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def children(self) -> list[int]:
        """The process ids of the daemon's children now (its v2Fronts processes)."""
        found = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True,
                               check=False)  # fmt: skip
        return [int(pid) for pid in found.stdout.split()]

    def kill(self) -> None:
        """Crash it: SIGKILL, no shutdown hooks run."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> BrokerProcess:
        """Starts it unless it runs already (``with daemons.broker(...) as broker:``)."""
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except Exception:
                self.kill()


class NamesrvProcess(BrokerProcess):
    """A ``wharf-namesrv`` on 127.0.0.1 with an ephemeral port (or ``port``, to keep it across
    restarts); ``settings`` go to ``<root>/namesrv.toml``, output to ``<root>/namesrv.log``."""

    def __init__(
        self,
        root: Path,
        settings: dict[str, Any] | None = None,
        port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(root, env=env)
        self.settings = dict(settings or {})  # NameServer settings only (no store sizes)
        self.port = port
        self.log_path = self.root / "namesrv.log"

    def start(self, timeout: float | None = None) -> NamesrvProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "namesrv.toml"
        config.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in self.settings.items()))
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = [
            sys.executable, "-m", "wharf.broker.namesrv", "--config", str(config),
            "--listen", f"127.0.0.1:{self.port}", "--ready-file", str(ready),
        ]  # fmt: skip
        self.proc, info = _launch(
            cmd, self.env, self.log_path, ready, timeout or self.ready_timeout, "namesrv"
        )
        self.endpoint = info["grpc"]
        # With remotingListen: the address RocketMQ 4.x clients are given as namesrvAddr.
        self.remoting_endpoint = info.get("remoting") or ""
        return self

    def __enter__(self) -> NamesrvProcess:
        return self if self.running else self.start()

    def wait_registered(self, brokers: Sequence[BrokerProcess], timeout: float = 15.0) -> None:
        """Blocks until every broker of ``brokers`` is in this NameServer's cluster info. A
        broker's ready file comes before its first registration (registration is a background
        session), so a cluster-wide create right after start could miss a group (CI, stop 73)."""
        import grpc  # here, as the rest of the harness only launches processes
        from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

        want = {b.endpoint for b in brokers}
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = namesrv_pb2_grpc.NameServiceStub(channel)
            while True:
                info = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5)
                missing = want - {b.address for b in info.brokers}
                if not missing:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{sorted(missing)} not registered with {self.endpoint} in {timeout} s"
                    )
                time.sleep(0.05)


class EtcdProcess:
    """An etcd member (Debian's ``etcd-server``, installed by ``make test``); ``endpoint`` is its
    client address. By default a one-member cluster on 127.0.0.1 with free ports, ready once
    /health says so (~0.7 s).

    What differs elsewhere is given, not rewritten: ``address`` (clients and peers, e.g. a
    network namespace's address), fixed ``port``/``peer_port`` (0: a free loopback port),
    ``prefix`` (an argv the command runs under, e.g. ``ip netns exec NS``), and for a member of
    a larger cluster its ``name`` and ``initial_cluster`` (every member's name and peer URL,
    its own included). A member of a cluster is healthy only once a quorum is up: ``launch``
    every member, then ``wait_healthy`` each (``start`` is both, for a lone member)."""

    def __init__(
        self,
        root: Path,
        *,
        address: str = "127.0.0.1",
        port: int = 0,
        peer_port: int = 0,
        prefix: Sequence[str] = (),
        name: str = "wharf-test",
        initial_cluster: dict[str, str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.address = address
        self.port = port or free_port()
        self.peer_port = peer_port or free_port()
        self.prefix = list(prefix)
        self.name = name
        self.endpoint = f"{address}:{self.port}"
        self.peer_url = f"http://{address}:{self.peer_port}"
        self.initial_cluster = dict(initial_cluster or {name: self.peer_url})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "etcd.log"

    def launch(self) -> EtcdProcess:
        """Start the process without waiting for it to be healthy."""
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd is not installed: run `make system-deps` (Debian etcd-server)")
        self.root.mkdir(parents=True, exist_ok=True)
        client = f"http://{self.endpoint}"
        cluster = ",".join(f"{name}={url}" for name, url in self.initial_cluster.items())
        cmd = [
            *self.prefix, binary, "--name", self.name, "--data-dir", str(self.root / "data"),
            "--log-level", "warn", "--logger", "zap",
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            # etcd 3.5's default (deploy/ runs v3.5.17), off in Debian's 3.4: without it a
            # member back from isolation, its term raised by lone elections, unseats the
            # leader, and etcd served nothing for ~5 s after a heal (test_partitions).
            "--pre-vote",
        ]  # fmt: skip
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as reply:
                return b'"true"' in reply.read()
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 30.0) -> EtcdProcess:
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited: {self.log_path.read_text(errors='replace')}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"etcd {self.name} not healthy in time")

    def start(self, timeout: float = 30.0) -> EtcdProcess:
        return self.launch().wait_healthy(timeout)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


# A benchmark's broker logs warnings only: its INFO lines (a client's connect, a topic made)
# are I/O on the loop the figures measure. One place for what every benchmark's broker has in
# common, as ``Daemons`` is for the tests' (a setting all benchmarks need goes here).
BENCH_LOG_LEVEL = ["--log-level", "WARNING"]


def bench_broker(
    root: Path,
    settings: dict[str, Any] | None = None,
    *,
    env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
) -> BrokerProcess:
    """A benchmark's broker, not started (``with`` starts and stops it): ``BrokerProcess``
    with warnings only in its log and ``extra_args`` after that."""
    args = [*BENCH_LOG_LEVEL, *extra_args]
    return BrokerProcess(root, settings, args, env=env, ready_timeout=ready_timeout)


LOG_TAIL_CHARS = 4000  # of each daemon's log in a failed test's report: its last ~50 lines


class Daemons:
    """Launches daemons under ``root`` and stops every one it launched in ``close``.

    ``root`` of a daemon: a ``Path`` is used as given; a ``str`` is a folder name under the
    factory's root; ``None`` is a fresh ``broker-N`` / ``namesrv-N`` folder there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[BrokerProcess] = []

    def _root(self, root: Path | str | None, kind: str) -> Path:
        if isinstance(root, Path):
            return root
        return self.root / (root or f"{kind}-{len(self.processes)}")

    def broker(
        self, root: Path | str | None = None, *args: Any, start: bool = True, **kwargs: Any
    ) -> BrokerProcess:
        """A ``BrokerProcess`` (started unless ``start=False``); the other arguments are its own."""
        process = BrokerProcess(self._root(root, "broker"), *args, **kwargs)
        self.processes.append(process)
        return process.start() if start else process

    def namesrv(
        self, root: Path | str | None = None, *args: Any, start: bool = True, **kwargs: Any
    ) -> NamesrvProcess:
        """A ``NamesrvProcess`` (started unless ``start=False``); the other arguments are its own."""
        process = NamesrvProcess(self._root(root, "namesrv"), *args, **kwargs)
        self.processes.append(process)
        return process.start() if start else process

    def log_tails(self) -> str:
        return "".join(
            f"--- {p.log_path} (last {LOG_TAIL_CHARS} chars)\n{p.log()[-LOG_TAIL_CHARS:]}\n"
            for p in self.processes
            if p.proc is not None
        )

    def close(self, failed: bool) -> None:
        """Brokers before the NameServers they register with: the reverse launch order."""
        for process in reversed(self.processes):
            if process.proc is None or process.proc.poll() is not None:
                continue
            os.kill(process.pid, signal.SIGCONT)  # a test may have left it SIGSTOPped
            if failed:
                process.kill()
                continue
            try:
                process.stop(timeout=15)  # kills it when that runs out
            except Exception:
                process.kill()
