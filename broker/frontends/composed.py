"""The composed front ends: the list of parts the root made (``broker/frontends/roster.py``) and the
steps it runs over all of them (frontend.py states the order): reserve (a part on its default
address whose port is taken is left out with one warning), attach, serve in list order (a
failure stops those already serving, in reverse), and the two-phase stop: every listener
closed before any grace period starts, then all parts given one grace period together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from wharf.broker.config import Config
from wharf.broker.frontends.frontend import (
    FrontEnd,
    FrontEndUnavailable,
    Part,
    PortBook,
    Serving,
    TlsSource,
)

__all__ = ["FrontEnds"]

log = logging.getLogger("broker")


class FrontEnds:
    def __init__(self) -> None:
        self.parts: list[FrontEnd] = []
        self.left_out: list[FrontEnd] = []  # on a default address that was taken
        self._serving: list[FrontEnd] = []  # listening, in serve order

    def reserve(
        self, makers: Sequence[Part], config: Config, ports: PortBook, tls: TlsSource
    ) -> None:
        for make in makers:
            front_end = make(config)
            if front_end is None:
                continue
            try:
                front_end.reserve(ports, tls)
            except FrontEndUnavailable as exc:
                if not front_end.optional:
                    raise
                log.warning("%s; serving without %s (set %s to another address or off)",
                            exc, front_end.name, exc.setting)  # fmt: skip
                self.left_out.append(front_end)
                continue
            self.parts.append(front_end)

    def store_host(self, advertised: str) -> str | None:
        """The first part's that must own the store host, else None."""
        return next((h for fe in self.parts if (h := fe.store_host(advertised))), None)

    def attach(self, serving: Serving) -> None:
        for front_end in self.parts:
            front_end.attach(serving)

    async def serve(self) -> None:
        for front_end in self.parts:
            try:
                await front_end.serve()
            except BaseException:
                await self.stop(0.0)
                raise
            self._serving.append(front_end)

    async def stop(self, grace_s: float) -> None:
        serving, self._serving = self._serving, []
        for front_end in serving:
            front_end.close_listener()
        ordered = list(reversed(serving))
        results = await asyncio.gather(
            *(fe.stop(grace_s) for fe in ordered), return_exceptions=True
        )
        for front_end, result in zip(ordered, results, strict=True):
            if isinstance(result, BaseException):
                log.error("stopping %s: %s", front_end.name, result)

    def find(self, name: str) -> Any:
        """The part called ``name`` (None when off or left out)."""
        return next((fe for fe in self.parts if fe.name == name), None)

    def ready(self) -> dict[str, str | None]:
        """Every part's ready-file keys, merged (a part left out: its keys, null)."""
        merged: dict[str, str | None] = {}
        for front_end in self.left_out:
            merged.update(dict.fromkeys(front_end.ready()))
        for front_end in self.parts:
            merged.update(front_end.ready())
        return merged

    def connections(self) -> dict[str, int]:
        return {fe.name: fe.connections() for fe in self._serving}
