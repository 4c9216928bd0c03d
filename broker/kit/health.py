"""The broker's health as a value every front end can show: the service names that serve
(each front end adds its own at ``attach``) and whether the broker serves or is stopping.
The gRPC front end mirrors it into ``grpc.health.v1`` (grpc_part.py); the root flips it
(SERVING before the ports open, NOT_SERVING first at shutdown) without knowing who shows it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

__all__ = ["HealthBoard"]

# (service names, serving) -> shown; "" is the whole broker.
Listener = Callable[[list[str], bool], Awaitable[None]]


class HealthBoard:
    def __init__(self) -> None:
        self.names: list[str] = [""]
        self.serving = False
        self._listeners: list[Listener] = []

    def add(self, name: str) -> None:
        """A front end serves ``name`` (a gRPC service's full name)."""
        if name not in self.names:
            self.names.append(name)

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def set_serving(self, serving: bool) -> None:
        self.serving = serving
        for listener in self._listeners:
            await listener(list(self.names), serving)
