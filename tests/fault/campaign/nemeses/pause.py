"""SIGSTOP of one daemon (a GC pause, a frozen VM): its connections stay open, nothing
answers; the heal sends SIGCONT. A paused master's lease lapses after 3 s."""

from __future__ import annotations

import time

from tests.fault.campaign.nemeses.base import Context, ProcessFault


class Pause(ProcessFault):
    kind = "pause (SIGSTOP)"
    # a master paused past its lease wakes up deposed
    window: tuple[float, float] | None = (0.5, 4.0)

    async def inject(self, ctx: Context) -> str:
        role = self.pick(ctx)
        what = f"pause {self.target.name} ({role})"
        self.begin(ctx, what, self.kind)
        if self.target.alive:
            self.target.pause()
        return what

    async def heal(self, ctx: Context) -> None:
        self.target.resume()
        self.fault.end = time.monotonic()
