"""What idling between messages does to a step's own time (issue 67): the same work, hot and
after the process slept.

    python -m tests.bench.cold_steps [--samples 2000]

A lone message at 1k msg/s finds every process on its path asleep (the producer, the broker's
loop and sync thread, the consumer), and each wakes to run its step once. This program times
three steps back to back (pause 0) and each after a ``time.sleep`` of 0.1 ms and 1 ms, as a
lone message's steps run:

- ``sdk encode``: the SDK's record encode of a bare 1 KiB body with its unique id
  (``RecordEncoder.encode_bare``, what ``Producer.send`` does before the batcher: Python);
- ``crc32 1 KiB``: ``zlib.crc32`` of 1 KiB (one C call: little code, little data);
- ``dict of 50``: a small dict built in Python (code and allocation, no I/O).

Each p50 in us and its ratio to the hot one. On this VM the ratio is what a lone message's
Python steps pay per wake-up beside what a micro-benchmark of the same step says.
"""

from __future__ import annotations

import argparse
import os
import time
import zlib
from collections.abc import Callable

from wharf.client.ids import new_unique_id
from wharf.client.record_encoder import RecordEncoder

PAUSES_S = (0.0, 0.0001, 0.001)


def p50_us(step: Callable[[], object], pause_s: float, samples: int) -> float:
    took: list[int] = []
    for _ in range(samples):
        if pause_s:
            time.sleep(pause_s)
        started = time.perf_counter_ns()
        step()
        took.append(time.perf_counter_ns() - started)
    took.sort()
    return took[len(took) // 2] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    encoder = RecordEncoder()
    tail = encoder.tail("cold")
    body = os.urandom(1024)
    steps: dict[str, Callable[[], object]] = {
        "sdk encode": lambda: encoder.encode_bare(tail, body, new_unique_id()),
        "crc32 1 KiB": lambda: zlib.crc32(body),
        "dict of 50": lambda: {i: i for i in range(50)},
    }
    print(f"load average {os.getloadavg()[0]:.2f}; p50 us (ratio to pause 0)")
    for name, step in steps.items():
        hot = p50_us(step, 0.0, args.samples)
        cells = [f"{hot:6.1f}"]
        for pause in PAUSES_S[1:]:
            cold = p50_us(step, pause, args.samples)
            cells.append(f"{cold:6.1f} ({cold / hot:4.1f}x)")
        print(f"  {name:12s} pause 0: {cells[0]}   0.1 ms: {cells[1]}   1 ms: {cells[2]}")


if __name__ == "__main__":
    main()
