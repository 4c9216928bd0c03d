"""``python -m tests.fault.campaign [--minutes 30 | --faults N] [--seed N] [--window 1-2]
[--gap 0.3-1] [--workdir DIR] [--history FILE]``: the fault campaign as a program (root,
network namespaces, nftables, FUSE and etcd needed). Prints the summary table; exit status 1
on any violation, 2 when the machine cannot run it."""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
from pathlib import Path

from tests.fault.campaign.protocols import involves_kafka
from tests.fault.campaign.runner import Settings, run
from tests.fault.checker import History
from tests.fault.netns import Network, available


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    return float(lo), float(hi or lo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=None, help="run this long")
    parser.add_argument("--faults", type=int, default=None, help="stop after N faults")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--window", type=_range, default=(1.0, 2.0), help="fault length, s")
    parser.add_argument("--gap", type=_range, default=(0.3, 1.0), help="between faults, s")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--history", type=Path, default=None, help="dump the history here")
    args = parser.parse_args(argv)
    reason = available() or (None if shutil.which("etcd") else "etcd is not installed")
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    seed = random.randrange(2**32) if args.seed is None else args.seed
    settings = Settings(
        faults=args.faults if args.faults is not None else (10**9 if args.minutes else 100),
        seconds=args.minutes * 60 if args.minutes else float("inf"),
        window=args.window, gap=args.gap, seed=seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )  # fmt: skip
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wharf-fault-campaign-"))
    history = History()
    try:
        with Network() as net:
            summary, _ = asyncio.run(run(net, workdir, settings, history))
    finally:
        if args.history:
            history.dump(args.history)
    print(summary.table())
    print(f"client errors: {summary.client_errors}")
    found = [v for name in summary.report.VIOLATIONS for v in getattr(summary.report, name)]
    kafka = sum(map(involves_kafka, found))
    print(f"violations naming a Kafka record or group: {kafka}; others: {len(found) - kafka}")
    if summary.ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not summary.ok:
        history.dump(workdir / "history.jsonl")
        print(f"kept for a post-mortem: {workdir}", file=sys.stderr)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
