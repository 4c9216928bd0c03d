"""``python -m wharf.broker.fronts``: one front process (the broker's ``v2Fronts`` part starts
them; by hand only to try one).

    python -m wharf.broker.fronts --store HOST:PORT --listen HOST:PORT --ready FILE
        [--max-bytes N] [--inflight N]

It stops on SIGTERM and, on Linux, when the process that started it dies (PR_SET_PDEATHSIG),
so a broker killed with -9 leaves no front holding its port.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys
from pathlib import Path

import uvloop
from wharf.broker.fronts.server import serve

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent dies; exit now if it already has."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        raise SystemExit(0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m wharf.broker.fronts",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--store", required=True, help="the broker's wire port, host:port")
    parser.add_argument("--listen", required=True, help="the fronts' gRPC address, host:port")
    parser.add_argument("--ready", type=Path, required=True, help="written once serving")
    parser.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024,
                        help="largest request (the broker's rpcMaxMessageSize)")  # fmt: skip
    parser.add_argument("--inflight", type=int, default=1,
                        help="merged SendMessage requests out at once per topic and client")  # fmt: skip
    parser.add_argument("--grpc-options", default="[]",
                        help="the broker's gRPC server options, a JSON list of [name, value]")  # fmt: skip
    parser.add_argument("--max-concurrent-rpcs", type=int, default=0, help="0 = no bound")
    parser.add_argument("--parent", type=int, default=0, help="stop when this process dies")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if args.parent:
        die_with_parent(args.parent)
    options = [(name, value) for name, value in json.loads(args.grpc_options)]
    options = options or [("grpc.so_reuseport", 1), ("grpc.max_receive_message_length",
                                                      args.max_bytes)]  # fmt: skip
    uvloop.run(serve(args.store, args.listen, args.ready, args.max_bytes, args.inflight, options,
                     args.max_concurrent_rpcs or None))  # fmt: skip


if __name__ == "__main__":
    main()
