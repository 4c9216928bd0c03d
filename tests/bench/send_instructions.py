"""Instructions a message of the broker's send path, one topic against many (issue 33): a count
that does not move with the VM, for changes worth 1-2 % that no throughput program here resolves.

    .venv/bin/python -m tests.bench.send_instructions [--topics 1,256] [--requests 100,500]
        [--cache BYTES]

Each configuration runs an in-process broker (``tests/inproc.py``) whose ``SendProcessor`` is fed
the bench's requests (``tests.bench.topics``' load, already serialized): for one topic a records
request of 544 messages, for N topics a columns request of 34 batches of 16 (34 topics, each
batch to its topic's next queue); every topic and queue is created and warmed first. It runs
under ``valgrind --tool=callgrind`` twice, for each of ``--requests`` (100 and 500), and the
difference of the two counts over the messages between them is the figure: start, warm-up and
exit cancel out. A message's count covers its parse, admission, checks, write, reply, metrics
and dispatch (the reput runs between requests, as in the daemon), not gRPC or the SDK. Ratio:
each configuration's count over the first's. Needs Debian's ``valgrind`` (not installed by the
project's set-up: a measuring tool, like ``perf``); ~1 min a configuration.

Repeatability: two runs of one configuration differed by 1.1 % (256 topics 11,614 and 11,744:
the dispatch's chunks follow the threads' timing), against 3-5 % for a throughput program.
Instructions are not time: a cold line costs ~100 instructions' time and does not show here
(``perf`` of the bench's daemon does that part). ``--cache BYTES`` adds callgrind's simulated
misses a message (first level as the host's, last level BYTES, 16-way): with 1 MiB, this VM's
L2, 256 topics missed ~13 lines a message more than one topic (2026-11-27), where the default
last level (the host's L3) showed ~0.2: the records streamed through each request (~136
lines a message) evict the per-topic and per-queue state that a topic's next batch, ~7.5
requests later, reads.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUEUES = 4
BATCH = 16
BATCHES = 34  # a request: 34 x 16 = 544 messages, as the SDK's requests of ~512
BODY = 1024


def _records(topic: str, count: int, first_id: int) -> bytes:
    from wharf.store.codec.send_records import encode_record, topic_tail

    tail = topic_tail(topic)
    body = os.urandom(BODY)
    return b"".join(
        encode_record(
            tail,
            body,
            f"UNIQ_KEY\x01{'7F000001000100000000%012X' % (first_id + i)}\x02".encode(),
            0,
            0,
            1_700_000_000_000,
        )
        for i in range(count)
    )


async def _inner(topics: int, requests: int) -> None:
    """The measured process: a warmed broker, then ``requests`` sends of the prepared load."""
    from wharf.broker.frontends.v1.send import SendProcessor
    from wharf.v1 import messaging_pb2

    from tests.inproc import start_inproc

    with tempfile.TemporaryDirectory(prefix="wharf-send-ir-", dir="/tmp") as tmp:
        broker = await start_inproc(
            Path(tmp),
            default_topic_queue_nums=str(QUEUES),
            mapped_file_size_commit_log=str(256 << 20),
            log_level="WARNING",
            # under valgrind the dispatch lags: a send held for it is served, not refused busy
            wait_time_mills_in_send_queue="600000",
        )
        try:
            send = SendProcessor(broker.controller.ctx).send
            names = [f"t{topics}-{i}" for i in range(topics)]
            for name in names:
                for queue_id in range(QUEUES):
                    await send(
                        messaging_pb2.SendMessageRequest(
                            topic=name, queue_id=queue_id, records=_records(name, 1, 0)
                        ),
                        "127.0.0.1:1",
                    )
            prepared = []
            for k in range(32):
                if topics == 1:
                    request = messaging_pb2.SendMessageRequest(
                        topic=names[0], records=_records(names[0], BATCH * BATCHES, k * 544)
                    )
                else:
                    chosen = [names[(k * BATCHES + j) % topics] for j in range(BATCHES)]
                    blobs = [_records(t, BATCH, k * 544 + j * BATCH) for j, t in enumerate(chosen)]
                    request = messaging_pb2.SendMessageRequest(
                        batch_topics=chosen,
                        batch_sizes=[len(blob) for blob in blobs],
                        records=b"".join(blobs),
                    )
                prepared.append(request.SerializeToString())
            await asyncio.sleep(0.5)  # the warm-up dispatched
            for i in range(requests):
                request = messaging_pb2.SendMessageRequest.FromString(prepared[i % 32])
                reply = await send(request, "127.0.0.1:1")
                reply.SerializeToString()
                if reply.count != BATCH * BATCHES:  # a refusal would count as a cheap message
                    raise SystemExit(f"request {i}: {reply.count} stored, status {reply.status}")
                if i % 2:
                    await asyncio.sleep(0)  # the reput's turn, as between a daemon's requests
            await asyncio.sleep(0.3)
        finally:
            await broker.close()


def _count(topics: int, requests: int, last_level: int) -> dict[str, int]:
    """callgrind's totals of one measured process: ``Ir`` (instructions), and with a
    ``last_level`` cache size its simulated misses too (``D1mr``, ``DLmr``: data reads missing
    the first level and the last level, ``DLmw`` the writes)."""
    with tempfile.TemporaryDirectory(prefix="wharf-callgrind-", dir="/tmp") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            *(["--cache-sim=yes", f"--LL={last_level},16,64"] if last_level else []),
            sys.executable, "-m", "tests.bench.send_instructions",
            "--inner", str(topics), "--requests", str(requests),
        ]  # fmt: skip
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # no spinning BLAS threads counted
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the measured process failed:\n{done.stderr[-3000:]}")
        text = out.read_text()
        events = re.search(r"^events: (.+)$", text, re.M)
        totals = re.search(r"^totals: (.+)$", text, re.M)
        if events is None or totals is None:
            raise SystemExit(f"no totals in {out}")
        return dict(zip(events.group(1).split(), map(int, totals.group(1).split()), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="1,256")
    parser.add_argument("--requests", default="100,500", help="the two request counts compared")
    parser.add_argument(
        "--cache",
        type=int,
        default=0,
        metavar="BYTES",
        help="also simulated cache misses a message, the last level BYTES large (16-way): "
        "1048576 for this VM's L2 (its L3 is shared with the host's other guests); ~2x slower",
    )
    parser.add_argument("--inner", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        import uvloop

        uvloop.run(_inner(args.inner, int(args.requests)))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    low, high = (int(n) for n in args.requests.split(","))
    counts = [int(n) for n in args.topics.split(",")]
    messages = (high - low) * BATCH * BATCHES
    print(
        f"Broker send path, in-process: instructions a message (callgrind, {high} - {low} "
        f"requests of {BATCH * BATCHES} messages of {BODY} B; N topics: {BATCHES} batches of "
        f"{BATCH} a request)\n"
    )
    misses = ("D1mr", "DLmr", "DLmw") if args.cache else ()
    print(f"{'topics':>7} {'instructions/msg':>17} {'ratio':>6}", *(f"{m:>7}" for m in misses))
    base = None
    for n in counts:
        few, many = _count(n, low, args.cache), _count(n, high, args.cache)
        per = {event: (many[event] - few[event]) / messages for event in many}
        base = base or per["Ir"]
        print(
            f"{n:>7,} {per['Ir']:>17,.0f} {per['Ir'] / base:>6.3f}",
            *(f"{per[m]:>7.2f}" for m in misses),
            flush=True,
        )


if __name__ == "__main__":
    main()
