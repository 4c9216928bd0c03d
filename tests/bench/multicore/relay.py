"""A relay process: every apache.rocketmq.v2 call taken on a gRPC port and forwarded, bytes
and headers as they came, to a broker's wire port (which serves the same services), or, with
``--canned-sends``, SendMessage answered here and nothing stored.

    python -m tests.bench.multicore.relay --store HOST:PORT --listen 127.0.0.1:PORT --ready FILE
        [--canned-sends]

The front-end plan's simplest form (broker/README.md, "Using N cores"): no call is decoded
here, so every method keeps the broker's semantics (ACL signatures, transactions' Telemetry
stream, long polling, pop) and the broker's per-call gRPC work moves to this process; the
broker pays a wire call instead. ``--canned-sends`` measures grpc.aio's own floor for the
official client's sends: each SendMessageRequest is parsed for its message ids and answered
OK with them (what the client checks), so the rate is what a broker built on grpc.aio could
reach if storing cost nothing. Other calls (QueryRoute, HeartBeat, Telemetry) still go to
the broker, which the client needs to start.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import uvloop
from grpc import aio
from wharf.broker.fronts.forward import SEND, MethodTable, forwarders
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2, service_pb2

REPO_ROOT = Path(__file__).resolve().parents[3]  # where ``-m tests.bench...`` resolves


def _canned_send() -> grpc.RpcMethodHandler:
    offsets = itertools.count()

    async def send(request: bytes, context: aio.ServicerContext) -> bytes:
        parsed = service_pb2.SendMessageRequest.FromString(request)
        reply = service_pb2.SendMessageResponse()
        reply.status.code = definition_pb2.OK
        reply.status.message = "OK"
        for message in parsed.messages:
            entry = reply.entries.add()
            entry.status.code = definition_pb2.OK
            entry.status.message = "OK"
            entry.message_id = message.system_properties.message_id
            entry.offset = next(offsets)
        return reply.SerializeToString()

    return grpc.unary_unary_rpc_method_handler(send)


async def serve(store: str, listen: str, ready: Path, canned_sends: bool) -> None:
    channel = WireChannel(store)
    handlers = forwarders(channel)
    if canned_sends:
        handlers[SEND] = _canned_send()
    server = aio.server(options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers((MethodTable(handlers),))
    port = server.add_insecure_port(listen)
    await server.start()
    await asyncio.to_thread(ready.write_text, json.dumps({"port": port}))
    await server.wait_for_termination()


def launch(store: str, listen: str, ready: Path, canned_sends: bool = False,
           timeout: float = 60.0) -> subprocess.Popen[bytes]:  # fmt: skip
    """This program in a process of its own, returned once it serves ``listen`` (its ready
    file written); RuntimeError, the process killed, if it exits or is not ready in time."""
    command = [sys.executable, "-m", "tests.bench.multicore.relay", "--store", store,
               "--listen", listen, "--ready", str(ready),
               *(["--canned-sends"] if canned_sends else [])]  # fmt: skip
    relay = subprocess.Popen(command, cwd=REPO_ROOT)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        code = relay.poll()
        if code is not None or time.monotonic() > deadline:
            relay.kill()
            relay.wait()
            why = f"exited with {code}" if code is not None else f"not ready in {timeout:g} s"
            raise RuntimeError(f"relay on {listen}: {why}")
        time.sleep(0.05)
    return relay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the broker's wire port, host:port")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--canned-sends", action="store_true")
    args = parser.parse_args()
    uvloop.run(serve(args.store, args.listen, args.ready, args.canned_sends))


if __name__ == "__main__":
    main()
