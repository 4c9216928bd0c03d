"""The broker's own CPU per apache.rocketmq.v2 SendMessage, without gRPC: what is left of
``v2_floor``'s 1.2x budget once a bare grpc.aio call is paid (issue 37).

    .venv/bin/python -m tests.bench.v2_inproc [--calls 5000] [--size 1024]

A ``BrokerController`` on its defaults in this process (ASYNC_FLUSH, 8 queues a topic, logging
at WARNING) and ``v2_floor``'s SendMessage requests (one NORMAL message with a tag, a key and
a message id, parsed before they are timed) handed straight to the v2 adapter's ``send``: the
conversion, the plan, the de-duplicated put, the reply entry. Two phases of ``--calls`` each,
after a warm-up: every call followed by one loop turn, so the reput task dispatches each
message on its own as under one-at-a-time clients ("send + its dispatch"), and the calls back
to back with the dispatch after them ("send, dispatch batched": the adapter's and the store's
share). The event loop thread's CPU (``time.thread_time``) a call is printed for both, with
the budget ``v2_floor`` leaves: 0.2x a bare grpc.aio unary call of the same size (~160-200 us
on the 2-core VM, printed by ``v2_floor``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid

import uvloop
from wharf.broker.controller import BrokerController
from wharf.broker.settings import load_settings
from wharf.rocketmq.v2 import service_pb2

from tests.bench.v2_floor import send_request

WARM_UP = 500


async def measure(calls: int, size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="wharf-v2-inproc-", dir="/tmp") as root:
        overrides = {
            "listen": "127.0.0.1:0",
            "metrics_listen": "127.0.0.1:0",
            "wire_listen": "off",
            "store_path_root_dir": root,
            "default_topic_queue_nums": 8,
            "log_level": "WARNING",
        }
        controller = BrokerController(load_settings(None, {}, overrides))
        await controller.start()
        try:
            sender = (
                controller.front_end("grpc").servicer("apache.rocketmq.v2.MessagingService").sender
            )
            body = os.urandom(size)
            requests = [
                service_pb2.SendMessageRequest.FromString(send_request(uuid.uuid4().hex, body))
                for _ in range(WARM_UP + 2 * calls)
            ]
            for request in requests[:WARM_UP]:
                await sender.send(request, "127.0.0.1:1")
            await controller.ctx.store.wait_dispatched(30)
            figures = {}
            each, batched = requests[WARM_UP : WARM_UP + calls], requests[WARM_UP + calls :]
            started = time.thread_time()
            for request in each:
                await sender.send(request, "127.0.0.1:1")
                await asyncio.sleep(0)  # the reput task dispatches it
            await controller.ctx.store.wait_dispatched(30)
            figures["send + its dispatch"] = (time.thread_time() - started) / calls * 1e6
            started = time.thread_time()
            for request in batched:
                await sender.send(request, "127.0.0.1:1")
            await controller.ctx.store.wait_dispatched(30)
            figures["send, dispatch batched"] = (time.thread_time() - started) / calls * 1e6
            return figures
        finally:
            await controller.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    figures = uvloop.run(measure(args.calls, args.size))
    print(f"v2 SendMessage in process, {args.calls} calls of {args.size} B, loop thread CPU:")
    for name, us in figures.items():
        print(f"  {name:24s} {us:7.1f} us a call")
    print("budget at 1.2x a bare grpc.aio call of ~160-200 us (v2_floor): 32-40 us a call")


if __name__ == "__main__":
    main()
