"""No slower than before: the daemon of two revisions under the same load, in alternating rounds.

    .venv/bin/python -m tests.bench.revisions --before REV [--after REV] [--rounds 6]
        [--messages 100000] [--size 1024] [--partitions 8] [--batch 64] [--phases P1,P2]

A revision other than the working tree is checked out (``git worktree add --detach``) under
``$TMPDIR/wharf-revisions/<sha>/src`` and installed, C accelerators built, into a venv beside it
whose third-party packages are this checkout's (a ``.pth`` line to .venv's site-packages); both
are kept for the next run. ``--after`` defaults to the working tree (this interpreter). The
clients are this checkout's, so only the broker differs.

Every round starts a fresh broker of each revision (ASYNC_FLUSH, logging at WARNING, the order
alternating round by round so the neighbours' drift hits both) and runs, on a fresh topic of
``--partitions`` queues: confluent-kafka produce and fetch of ``--messages`` records
(tests/bench/kafka.py's phases), the SDK's ``send_batch`` and pulls, and RocketMQ 4.x remoting
sends of a quarter as many, one and 16 a request (tests/bench/remoting.py's client: messages the
store encodes, where the other phases send records). Per phase: msg/s and the
broker's CPU per message (/proc/PID/stat; what the neighbours move least). The verdict per
figure is pooled over the rounds' ratios after/before (pooled.py): throughput ``>= 1.0`` and CPU
per message ``<= 1.0`` met, missed (slower, with 95% confidence) or undecided.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.bench.kafka import (
    create_topic,
    kafka_fetch,
    kafka_produce,
    measured,
    sdk_pull,
    sdk_send_batch,
)
from tests.bench.pooled import describe
from tests.bench.remoting import remoting_sends
from tests.harness import REPO_ROOT, Daemons

SETTINGS = {"flushDiskType": "ASYNC_FLUSH", "logLevel": "WARNING"}
PHASES = (
    "kafka produce", "kafka fetch", "sdk send_batch", "sdk pull", "remoting x1", "remoting x16"
)  # fmt: skip
REMOTING_SHARE = 4  # the remoting phases send --messages / 4 (one request a message is slower)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def installed(rev: str) -> str:
    """The interpreter of a venv holding ``rev``'s wharf (made once, then reused)."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    home = Path(tempfile.gettempdir()) / "wharf-revisions" / sha[:12]
    python = home / "venv" / "bin" / "python"
    stamp = home / "venv" / ".installed"
    if stamp.exists():
        return str(python)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "src").exists():
        git("worktree", "add", "--detach", str(home / "src"), sha)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
    # Third-party packages (pip and setuptools too) from this checkout's venv: only wharf
    # itself is built, by the setuptools that reads its pyproject (venv's bundled one is older).
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "_wharf_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    print(f"installing {sha[:12]} into {home / 'venv'} (C accelerators built: ~1 min)")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         str(home / "src")],
        check=True,
    )  # fmt: skip
    stamp.touch()
    return str(python)


def phases_of(
    python: str, args: argparse.Namespace, round_no: int, tmp: Path
) -> list[tuple[str, int, float, float]]:
    """(phase, messages, seconds, broker CPU seconds) of the four phases on a fresh broker run
    by ``python``."""
    settings = {**SETTINGS, "defaultTopicQueueNums": args.partitions}
    n, parts = args.messages, args.partitions
    topic, sdk_topic = f"rev-k-{round_no}", f"rev-sdk-{round_no}"
    extra = ["--kafka-listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0"]
    with Daemons(tmp).broker(tmp / "wharf", settings=settings, python=python,
                             extra_args=extra) as broker:  # fmt: skip
        kafka, endpoint, remoting = broker.kafka_endpoint, broker.endpoint, broker.remoting_endpoint
        few = n // REMOTING_SHARE
        create_topic(kafka, topic, parts)
        create_topic(kafka, sdk_topic, parts)
        works: list[tuple[str, Callable[[], int]]] = [
            ("kafka produce", lambda: kafka_produce(kafka, topic, n, args.size)),
            ("kafka fetch", lambda: kafka_fetch(kafka, topic, parts, n)),
            ("sdk send_batch", lambda: asyncio.run(sdk_send_batch(endpoint, sdk_topic, args))),
            ("sdk pull",
             lambda: asyncio.run(sdk_pull(endpoint, sdk_topic, args, n // parts * parts))),
            # Messages, not producer records: the store encodes them (the other write form).
            ("remoting x1", lambda: remoting_count(remoting, f"rev-r1-{round_no}", few, 1, args)),
            ("remoting x16",
             lambda: remoting_count(remoting, f"rev-r16-{round_no}", few, 16, args)),
        ]  # fmt: skip
        chosen = [(phase, work) for phase, work in works if phase in args.phases]
        return [(phase, *measured(broker.pid, work)) for phase, work in chosen]


def remoting_count(address: str, topic: str, count: int, batch: int, ns: argparse.Namespace) -> int:
    """RocketMQ 4.x sends (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE of ``batch``), 32 requests in
    flight: how many were stored."""
    sent, _ = asyncio.run(remoting_sends(address, topic, count, 32, ns.size, batch))
    return sent


def one_round(
    pythons: dict[str, str], args: argparse.Namespace, round_no: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """{(revision label, phase): (msg/s, broker us/msg)} of one round."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    labels = list(pythons) if round_no % 2 == 0 else list(pythons)[::-1]
    for label in labels:
        # Fresh files every round, deleted after it (tests/bench/kafka.py says why).
        with tempfile.TemporaryDirectory(prefix="wharf-rev-") as tmp:
            for phase, count, seconds, cpu in phases_of(pythons[label], args, round_no, Path(tmp)):
                out[label, phase] = (count / seconds, cpu / count * 1e6)
                print(f"round {round_no} {label:<6} {phase:<15} {count / seconds:>10,.0f} "
                      f"msg/s  broker {cpu / count * 1e6:6.1f} us/msg", flush=True)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="a git revision (commit, tag, branch)")
    parser.add_argument("--after", default="", help="a git revision; default: the working tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64, help="SDK send_batch size")
    parser.add_argument(
        "--phases", default=",".join(PHASES), help="comma-separated phases (default: all)"
    )
    args = parser.parse_args(argv)
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    pythons = {
        "before": installed(args.before),
        "after": installed(args.after) if args.after else sys.executable,
    }
    rounds = [one_round(pythons, args, n) for n in range(args.rounds)]
    print(f"\nafter / before, {args.before} -> {args.after or 'working tree'}:")
    for phase in args.phases:
        speed = [r["after", phase][0] / r["before", phase][0] for r in rounds]
        cpu = [r["after", phase][1] / r["before", phase][1] for r in rounds]
        print(f"  {phase:<15} msg/s: {describe(speed, '>=', 1.0)}")
        print(f"  {'':<15} us/msg: {describe(cpu, '<=', 1.0)}")
        print(f"  {'':<15} medians: before {statistics.median(r['before', phase][0] for r in rounds):,.0f} msg/s,"
              f" after {statistics.median(r['after', phase][0] for r in rounds):,.0f} msg/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
