"""The fronts as a broker part (broker/frontends/frontend.py says what a part is): ``v2Fronts``
processes of ``python -m wharf.broker.fronts`` on ``v2FrontsListen``, each forwarding to this
broker's wire port. Off (None) at ``v2Fronts = 0``, the default.

- reserve: the port is taken here first (a taken port stops the broker before recovery, as any
  part's; port 0 gets its real number), then let go just before the fronts bind it with
  SO_REUSEPORT, which a socket without it would refuse them.
- serve: every front started and ready (its ready file) within ``START_TIMEOUT_S``, else the
  broker stops with the front's exit named. A front that dies later is restarted after
  ``RESTART_DELAY_S`` (its clients reconnect; the broker holds every state).
- stop: SIGTERM to every front (each drains its calls ``server.STOP_GRACE_S``), then SIGKILL
  at the broker's grace. A broker killed with -9 takes them along (PR_SET_PDEATHSIG).

The wire port is required (its address is the fronts' upstream). Not with aclEnable (the
fronts' wire connection would be one unauthenticated caller for all clients) nor a TLS-only
broker (the fronts listen in plaintext): FrontEndUnavailable names the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from wharf.broker.config import Config, parse_host_port
from wharf.broker.frontends.frontend import FrontEndUnavailable, PortBook, Serving, TlsSource
from wharf.broker.frontends.grpc.part import server_options

__all__ = ["FrontsPart", "fronts_part"]

log = logging.getLogger("broker")
START_TIMEOUT_S = 30.0  # a front imports grpc and protobuf: ~1 s here, 30 on a loaded CI box
RESTART_DELAY_S = 1.0


class FrontsPart:
    name = "fronts"
    optional = False

    def __init__(self, config: Config) -> None:
        self.config = config
        self.count = config.broker.v2_fronts
        self.address = ""
        self.store = ""
        self._procs: list[asyncio.subprocess.Process | None] = [None] * self.count
        self._watch: list[asyncio.Task[None]] = []
        self._scratch = ""
        self._stopping = False
        # The gRPC port's options and bounds, SO_REUSEPORT on: the fronts share their port.
        options = server_options(config.broker, config.rpc_max_message_size)
        self._options = json.dumps(
            [o for o in options if o[0] != "grpc.so_reuseport"] + [("grpc.so_reuseport", 1)]
        )

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        broker = self.config.broker
        if broker.acl_enable:
            raise FrontEndUnavailable("v2Fronts cannot serve with aclEnable yet: turn one off",
                                      "v2Fronts")  # fmt: skip
        if tls.tls_only:
            raise FrontEndUnavailable("v2Fronts listen in plaintext, the broker is TLS-only "
                                      "(tlsEnable without tlsListen)", "v2Fronts")  # fmt: skip
        wire = ports.by_setting.get("wireListen")
        if wire is None:
            raise FrontEndUnavailable("v2Fronts forward to the wire port: set wireListen",
                                      "wireListen")  # fmt: skip
        host = wire.host
        self.store = f"{'127.0.0.1' if host in ('', '0.0.0.0', '::') else host}:{wire.port}"
        listen = broker.v2_fronts_listen
        if not listen:
            host, port = parse_host_port(broker.listen, "listen")
            listen = f"{host}:{ports.by_setting['listen'].port + 4 if port else 0}"
        reserved = ports.reserve(listen, "v2FrontsListen")
        self.address = reserved.address
        # Let go now: the fronts bind it with SO_REUSEPORT, which this socket would refuse.
        ports.release(reserved)
        for sock in reserved.sockets:
            sock.close()

    def store_host(self, advertised: str) -> str | None:
        return None

    def attach(self, serving: Serving) -> None:
        """Nothing to attach: the fronts reach the broker through the wire port's handlers."""

    async def serve(self) -> None:
        self._scratch = await asyncio.to_thread(tempfile.mkdtemp, prefix="wharf-fronts-")
        try:
            for index in range(self.count):
                self._procs[index] = await self._start(index)
        except BaseException:
            await self.stop(0)
            raise
        self._watch = [asyncio.ensure_future(self._keep(i)) for i in range(self.count)]
        log.info("v2 fronts: %d processes on %s (official 5.x clients dial it), forwarding to "
                 "wire://%s", self.count, self.address, self.store)  # fmt: skip

    async def _start(self, index: int) -> asyncio.subprocess.Process:
        ready = Path(self._scratch) / f"front-{index}.ready"
        ready.unlink(missing_ok=True)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "wharf.broker.fronts", "--store", self.store,
            "--listen", self.address, "--ready", str(ready),
            "--max-bytes", str(self.config.rpc_max_message_size),
            "--parent", str(os.getpid()), "--log-level", self.config.broker.log_level,
            "--grpc-options", self._options,
            "--max-concurrent-rpcs", str(self.config.broker.max_concurrent_rpcs or 0),
        )  # fmt: skip
        try:
            await self._until_ready(index, proc, ready)
        except BaseException:  # failed, or cancelled by a stop mid-restart: none left behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
            raise
        return proc

    async def _until_ready(self, index: int, proc: asyncio.subprocess.Process, ready: Path
                           ) -> None:  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while not await asyncio.to_thread(ready.exists):
            if proc.returncode is not None or loop.time() > deadline:
                why = (f"exited with {proc.returncode}" if proc.returncode is not None
                       else "not ready in time")  # fmt: skip
                raise FrontEndUnavailable(
                    f"front {index} on {self.address} (v2FrontsListen): {why}; its log is above",
                    "v2FrontsListen",
                )
            await asyncio.sleep(0.05)

    async def _keep(self, index: int) -> None:
        """Restart front ``index`` whenever it dies, until the broker stops."""
        while not self._stopping:
            proc = self._procs[index]
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            log.warning("front %d (pid %d) exited with %s; restarting in %g s", index, proc.pid,
                        code, RESTART_DELAY_S)  # fmt: skip
            while not self._stopping:  # a failed start is retried, its exit already told
                await asyncio.sleep(RESTART_DELAY_S)
                try:
                    self._procs[index] = await self._start(index)
                    break
                except FrontEndUnavailable as exc:
                    log.error("%s; retrying in %g s", exc, RESTART_DELAY_S)

    def ready(self) -> dict[str, str | None]:
        return {"v2_fronts": self.address or None}

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None and p.returncode is None]

    def connections(self) -> int:
        return 0  # the fronts' clients: each front's own; the broker sees their wire connections

    def close_listener(self) -> None:
        """The fronts stop taking calls when they stop: they drain on SIGTERM themselves."""

    async def stop(self, grace_s: float) -> None:
        self._stopping = True
        for task in self._watch:
            task.cancel()
        live = [p for p in self._procs if p is not None and p.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in live:
            try:
                async with asyncio.timeout(max(grace_s, 1.0)):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._scratch:
            await asyncio.to_thread(shutil.rmtree, self._scratch, True)


def fronts_part(config: Config) -> FrontsPart | None:
    return FrontsPart(config) if config.broker.v2_fronts > 0 else None
