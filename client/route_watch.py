"""RouteWatch: a client's routes follow the NameServers' WatchRoutes push instead of a poll.

The NameServer pushes a ``RouteChange`` for a watched topic whenever its route moves (a broker
registers, changes its topics, unregisters, dies or goes silent), and once per topic when the
stream opens. Each one calls ``on_change(topic, version)`` at once (version: the route's, as
QueryRoute answers it; 0 when the topic has no route now); the owner drops its cached route
(``ClusterSender``, ``ClusterQueues``) or reconciles its consumers (``ClusterConsumers``), so a
route change reaches producers and consumers in well under a second instead of after the
next poll (RocketMQ clients poll every 30 s).

``healthy`` is True while a stream is open and has answered. When it breaks (the NameServer
died, a network cut) the owner falls back to polling (its ``route_ttl_s`` / ``route_refresh_s``)
and the watch reopens every ``retry_s`` (1 s) on the next NameServer; the initial changes of
the new stream name every watched topic's version, so a route that moved meanwhile is dropped
(owners compare it with their cached route's version).
Watching a new topic reopens the stream with it (the set only grows; a few topics per client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc
from wharf.client.namesrv import NameServerClient

log = logging.getLogger("wharf.client.route_watch")


class RouteWatch:
    def __init__(
        self,
        namesrv: NameServerClient,
        on_change: Callable[[str, int], None],
        retry_s: float = 1.0,
    ) -> None:
        self._namesrv = namesrv
        self._on_change = on_change
        self.retry_s = retry_s
        self.topics: set[str] = set()
        self.healthy = False
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def add(self, topics: set[str] | list[str]) -> None:
        """Watch these topics too (reopens the stream when one is new)."""
        new = set(topics) - self.topics
        if not new:
            return
        self.topics |= new
        self._restart()

    def _restart(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.healthy = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="route-watch")

    async def _run(self) -> None:
        while True:
            address, call = self._namesrv.watch(sorted(self.topics))
            try:
                async for change in call:
                    if not self.healthy:
                        self.healthy = True
                        if self._failing:
                            log.info("watching routes on NameServer %s again", address)
                            self._failing = False
                    self._on_change(change.topic, change.version)
            except asyncio.CancelledError:
                call.cancel()
                raise
            except grpc.RpcError as exc:
                if not self._failing:
                    log.warning(
                        "route watch on NameServer %s broke (%s); polling until it reopens",
                        address, exc.code().name if hasattr(exc, "code") else exc,
                    )  # fmt: skip
                    self._failing = True
            self.healthy = False
            self._namesrv.watch_failed(address)
            await asyncio.sleep(self.retry_s)

    async def close(self) -> None:
        task, self._task = self._task, None
        self.healthy = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
