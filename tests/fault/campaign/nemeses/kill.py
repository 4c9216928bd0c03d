"""kill -9 of one daemon (the master, the replica, the NameServer or etcd); the heal starts it
again on the same data."""

from __future__ import annotations

import time

from tests.fault.campaign.nemeses.base import Context, ProcessFault


class Kill(ProcessFault):
    kind = "kill -9"

    async def inject(self, ctx: Context) -> str:
        role = self.pick(ctx)
        what = f"kill -9 {self.target.name} ({role})"
        self.begin(ctx, what, self.kind)
        self.target.kill()
        return what

    async def heal(self, ctx: Context) -> None:
        try:
            if not self.target.alive:
                await self.target.start()
        finally:
            self.fault.end = time.monotonic()
