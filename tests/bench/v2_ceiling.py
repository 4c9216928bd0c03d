"""The 5.x gRPC produce path's ceiling on this machine: what a broker built on grpc.aio can
serve Apache's 5.x Java client, beside Apache RocketMQ's proxy.

    .venv/bin/python -m tests.bench.v2_ceiling [--rounds 6] [--messages 20000]
        [--configs rocketmq,wharf,fronts,groups2,relay,floor] [--output FILE] [--pool FILE ...]

Each round runs the same ``PeerBench rmq5-produce`` (``peers.py``: rocketmq-client-java 5.0.8,
64 threads of synchronous sends, 1 KiB; one Producer, so one HTTP/2 connection) against each
configuration, in an order rotated every round, each on fresh processes (ASYNC_FLUSH, the
peers program's store sizes):

- ``rocketmq``: Apache's NameServer and proxy in local mode (the broker inside), as in peers;
- ``wharf``: one Wharf broker, the client at its gRPC port;
- ``fronts``: one Wharf broker with ``v2Fronts = 1`` (broker/fronts/), the client at the
  front's port: every call forwarded to the wire port, NORMAL sends merged while one is out;
- ``groups2``: Wharf as a ``wharf-namesrv`` and two broker groups (``peers.py --wharf-groups
  2``, the topic's 8 queues split 4 + 4): the client's route lists both groups, so it opens two
  connections, one to each broker process;
- ``relay``: one broker behind one relay process (``multicore/relay.py``) on the gRPC port
  the broker advertises, every call forwarded to the broker's wire port: the front-end plan
  of broker/README.md for a client of one connection (SO_REUSEPORT spreads connections, not
  calls, so one client meets one front);
- ``floor``: the relay answering SendMessage itself (``--canned-sends``: the request parsed,
  one OK entry per message id, nothing stored), the other calls still the broker's: the rate
  of grpc.aio's own work for this client, above any broker built on it.

Per configuration and round: msg/s (the tool's count over its time), the server CPU per
message (the broker's process, and the relay's, from /proc; the NameServers not counted, as
in peers; groups2: the NameServer counted, as in peers), and the client JVM's, its JIT
compiler threads apart from the rest (``jvm_threads.py``: warm-up that shares the cores).
Then each Wharf configuration against ``rocketmq``, round by round, decided by pooled rounds
(``pooled.py``) against produce >= 1.0x. ``--pool``: judge saved outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TypedDict

from tests.bench.broker_send import process_cpu_seconds
from tests.bench.jvm_threads import JvmThreads
from tests.bench.multicore.relay import launch
from tests.bench.peers import (
    STORE_SIZES,
    Broker,
    in_netns,
    peer_bench,
    start_rocketmq,
    start_wharf,
)
from tests.bench.peers_groups import create_topics
from tests.bench.peers_probes import QUEUES, create_rmq_topic
from tests.bench.pooled import describe, round_lines
from tests.harness import free_port

CONFIGS = ("rocketmq", "wharf", "fronts", "groups2", "relay", "floor")
FLUSH = "ASYNC_FLUSH"


class Run(TypedDict):
    round: int
    config: str
    msg_s: float
    failed: int
    cpu_us: list[
        int
    ]  # per message: the broker's processes (groups2: 3), then the relay's or front's
    client_us: list[int]  # per message: the client JVM's JIT threads, then its other threads


def start_relayed(root: Path, canned: bool) -> tuple[Broker, subprocess.Popen[bytes]]:
    """A Wharf broker advertising the relay's port, and the relay on it."""
    wire, front = free_port(), free_port()
    extra = {"wireListen": f"127.0.0.1:{wire}", "advertisedAddress": f"127.0.0.1:{front}"}
    broker = start_wharf(root / "broker", FLUSH, "rmq5", STORE_SIZES, extra=extra)
    try:
        relay = launch(f"127.0.0.1:{wire}", f"127.0.0.1:{front}", root / "relay.ready", canned)
    except Exception:
        broker.stop()
        raise
    broker.grpc = f"127.0.0.1:{front}"
    return broker, relay


def one_run(config: str, round_no: int, messages: int, scratch: Path) -> Run:
    root = Path(tempfile.mkdtemp(prefix=f"{config}-", dir=scratch))
    relay: subprocess.Popen[bytes] | None = None
    try:
        if config == "rocketmq":
            broker = start_rocketmq(root / "broker", FLUSH, True, STORE_SIZES)
        elif config in ("wharf", "groups2", "fronts"):
            groups = 2 if config == "groups2" else 1
            broker = start_wharf(root / "broker", FLUSH, "rmq5", STORE_SIZES, groups,
                                 fronts=1 if config == "fronts" else 0)  # fmt: skip
        else:
            broker, relay = start_relayed(root, canned=config == "floor")
        pids = [*broker.counted().values(), *([relay.pid] if relay else [])]
        try:
            if broker.groups:
                create_topics(broker.groups, {"bench": QUEUES})
            else:
                create_rmq_topic(broker.remoting, "bench")
            before = [process_cpu_seconds(pid) for pid in pids]
            with JvmThreads("dev.wharf.peers.PeerBench") as client:
                sent = peer_bench(["rmq5-produce", broker.grpc, "bench", str(messages), "1024",
                                   "64"], root / "client")  # fmt: skip
            used = [process_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
        finally:
            if relay is not None:
                relay.terminate()
                relay.wait(30)
            broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "round": round_no, "config": config, "msg_s": round(sent["count"] / sent["seconds"], 1),
        "failed": int(sent["failed"]), "cpu_us": [round(u / messages * 1e6) for u in used],
        "client_us": [round(s / messages * 1e6) for s in client.seconds().values()],
    }  # fmt: skip


def report(runs: list[Run]) -> None:
    by_round: dict[int, dict[str, Run]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["config"]] = run
    configs = [c for c in CONFIGS if any(c in r for r in by_round.values())]
    print("config    msg/s median (range)        server CPU us/msg median (each process)"
          "   client JVM us/msg median: JIT + rest")  # fmt: skip
    for config in configs:
        rates = [r[config]["msg_s"] for r in by_round.values() if config in r]
        cpus = [r[config]["cpu_us"] for r in by_round.values() if config in r]
        total = statistics.median(sum(c) for c in cpus)
        each = [statistics.median(c[i] for c in cpus) for i in range(len(cpus[0]))]
        # outputs saved before the client was sampled have no client_us
        clients = [r[config]["client_us"] for r in by_round.values()
                   if config in r and "client_us" in r[config]]  # fmt: skip
        client = "-"
        if clients:
            jit, rest = (statistics.median(c[i] for c in clients) for i in (0, 1))
            client = f"{jit:,.0f} + {rest:,.0f}"
        print(f"{config:<9} {statistics.median(rates):8,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
              f"      {total:6,.0f} {each}   {client}")  # fmt: skip
    for config in configs:
        if config == "rocketmq":
            continue
        ratios = [r[config]["msg_s"] / r["rocketmq"]["msg_s"]
                  for r in by_round.values() if config in r and "rocketmq" in r]  # fmt: skip
        if ratios:
            print(f"{config} / rocketmq produce: {describe(ratios, '>=', 1.0)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--output", help="append the round lines to this file")
    parser.add_argument("--pool", nargs="*", default=None, help="judge saved outputs instead")
    args = parser.parse_args()
    if args.pool is not None:
        report([json.loads(line.split(" ", 2)[2]) for line in round_lines(args.pool)])
        return
    configs = args.configs.split(",")
    if not set(configs) <= set(CONFIGS):
        parser.error(f"--configs: of {', '.join(CONFIGS)}")
    in_netns("tests.bench.v2_ceiling")
    print(f"# v2_ceiling {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} {FLUSH} "
          f"{args.messages} x 1 KiB, rounds {args.rounds}, load {os.getloadavg()[0]:.1f}",
          flush=True)  # fmt: skip
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="wharf-v2-ceiling-") as scratch:
        for round_no in range(1, args.rounds + 1):
            shift = (round_no - 1) % len(configs)
            for config in configs[shift:] + configs[:shift]:
                run = one_run(config, round_no, args.messages, Path(scratch))
                runs.append(run)
                line = f"round {round_no}: {json.dumps(run)}"
                print(line, flush=True)
                if args.output:
                    with open(args.output, "a") as out:
                        out.write(line + "\n")
    report(runs)
    print(f"# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
