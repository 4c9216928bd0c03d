"""One front process: a grpc.aio server on the fronts' port (SO_REUSEPORT: the kernel hands
each new connection to one of the fronts) with the forwarders and the SendMessage coalescer
over one wire channel to the broker."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import grpc
from grpc import aio
from wharf.broker.fronts.coalesce import AckMerge, Coalescer, SendMerge
from wharf.broker.fronts.forward import MethodTable, forwarders
from wharf.client.wire_channel import WireChannel

__all__ = ["serve"]

log = logging.getLogger("broker.fronts")
STOP_GRACE_S = 5.0  # calls in flight at SIGTERM get this long (the broker's own grace is longer)


async def serve(
    store: str,
    listen: str,
    ready: Path,
    max_bytes: int,
    inflight: int,
    options: list[tuple[str, Any]],
    max_concurrent_rpcs: int | None,
) -> None:
    """Serve until SIGTERM or SIGINT; ``ready`` gets ``{"port", "pid"}`` once listening.
    ``options``: the broker's gRPC port's (its bounds: streams, idle, handshake, connections)."""
    channel = WireChannel(store)
    sends = Coalescer(channel, SendMerge, max_bytes, inflight)
    acks = Coalescer(channel, AckMerge, max_bytes, inflight)
    handlers = forwarders(channel)
    for merged in (sends, acks):
        handlers[merged.method] = grpc.unary_unary_rpc_method_handler(merged.handle)
    server = aio.server(options=options, maximum_concurrent_rpcs=max_concurrent_rpcs)
    server.add_generic_rpc_handlers((MethodTable(handlers),))
    port = server.add_insecure_port(listen)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await asyncio.to_thread(_write_ready, ready, {"port": port, "pid": os.getpid()})
    log.info("front %d on %s -> wire://%s", os.getpid(), listen, store)
    await stop.wait()
    await server.stop(STOP_GRACE_S)
    await channel.close()
    log.info("front %d stopped: %d sends in %d requests, %d acks in %d", os.getpid(),
             sends.calls, sends.requests, acks.calls, acks.requests)  # fmt: skip


def _write_ready(ready: Path, info: dict[str, int]) -> None:
    """Whole or absent: the broker polls for the file and reads it at once."""
    partial = ready.with_name(ready.name + ".tmp")
    partial.write_text(json.dumps(info))
    os.replace(partial, ready)
