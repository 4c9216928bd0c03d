"""A power cut of one replica's machine (the master more often): SIGKILL and the powerfs cut
in the same instant, a new boot id; the heal boots it again (machine-crash recovery)."""

from __future__ import annotations

import time

from tests.fault.campaign.nemeses.base import Context, ProcessFault


class PowerCut(ProcessFault):
    kind = "power cut"

    async def inject(self, ctx: Context) -> str:
        master = ctx.master()
        role = ctx.rng.choices(["master", "replica"], weights=[2, 1])[0]
        self.target = master if role == "master" else ctx.replica_of(master)
        self.begin(ctx, f"power cut {self.target.name} ({role})", self.kind)
        pending = self.target.power_cut()  # no await between the kill and the cut
        self.fault.what += (f": dropped {len(pending['journal'])} name ops, "
                            f"{len(pending['unsynced_files'])} unsynced files")  # fmt: skip
        return self.fault.what

    async def heal(self, ctx: Context) -> None:
        try:
            await self.target.start()
        finally:
            self.fault.end = time.monotonic()
