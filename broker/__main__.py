"""``python -m wharf.broker`` / ``wharf-broker``: run the broker daemon until SIGTERM or SIGINT.

Exit codes: 0 clean stop, 1 failure while starting or serving, 2 invalid configuration,
130 forced exit on a second signal.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import signal
import sys
from pathlib import Path

import uvloop
from wharf.broker.controller import BrokerController, StartupError
from wharf.broker.gc_policy import FreezeSurvivors
from wharf.broker.kit.ready_file import write_ready_file_blocking
from wharf.broker.settings import LOG_LEVELS, ConfigError, load_settings
from wharf.store.fast.malloc import keep_large_buffers_on_heap

log = logging.getLogger("broker")
EXIT_CONFIG = 2
EXIT_FORCED = 130
EXIT_RESTART = 75  # controller mode: exec a fresh broker process (EX_TEMPFAIL)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wharf-broker",
        description="Run the Wharf broker. Settings: defaults < --config TOML (RocketMQ names, "
        "e.g. flushDiskType) < WHARF_<NAME> environment variables < these flags.",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file with broker settings")
    parser.add_argument("--store-dir", metavar="DIR", help="storePathRootDir (default: data)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="gRPC address (127.0.0.1:8081)")
    parser.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="metrics address (127.0.0.1:9100)"
    )
    parser.add_argument(
        "--advertise", metavar="HOST:PORT", help="address clients should dial (default: listen)"
    )
    parser.add_argument(
        "--tls-listen",
        metavar="HOST:PORT",
        help="tlsListen: a TLS port next to the plaintext --listen (needs tlsEnable)",
    )
    parser.add_argument(
        "--wire-listen",
        metavar="HOST:PORT",
        help='wireListen: the wire port (default: listen port + 2; "off" = none)',
    )
    parser.add_argument(
        "--remoting-listen",
        metavar="HOST:PORT",
        help="remotingListen: RocketMQ 4.x remoting, the namesrvAddr of 4.x clients "
        '(127.0.0.1:10911; port 0: a free port; "off" = none)',
    )
    parser.add_argument(
        "--kafka-listen",
        metavar="HOST:PORT",
        help="kafkaListen: the Kafka protocol, bootstrap.servers of Kafka clients "
        '(127.0.0.1:9092; port 0: a free port; "off" = none)',
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="written once serving: a JSON object of the addresses served (grpc, tls, "
        "plaintext, wire, remoting, kafka and their *_tls, metrics, advertised, ha; null "
        "when off) and the pid",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper)
    return parser


def _flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    pairs = {
        "store_path_root_dir": args.store_dir,
        "listen": args.listen,
        "metrics_listen": args.metrics_listen,
        "advertised_address": args.advertise,
        "tls_listen": args.tls_listen,
        "wire_listen": args.wire_listen,
        "remoting_listen": args.remoting_listen,
        "kafka_listen": args.kafka_listen,
        "log_level": args.log_level,
    }
    return {name: value for name, value in pairs.items() if value is not None}


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as servers do at start (the soft default
    is often 1024). Every client connection holds a descriptor (10,000 idle gRPC connections
    measured at ~14 KiB of broker memory each), and so does every open consume queue and index
    file; the hard limit is the operator's decision. Returns (soft, hard) in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. an unlimited hard limit some kernels refuse
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


def ready_info(controller: BrokerController) -> dict[str, object]:
    """What the ready file says: every front end's keys (``grpc`` is the listen port, TLS-only
    when tlsEnable without tlsListen; ``tls`` / ``plaintext`` name the gRPC port serving
    each; ``wire``, ``remoting``, ``kafka`` and their ``*_tls``: null when off), then the
    metrics port, the advertised endpoint, the pid and the replication listener (``ha``)."""
    metrics_host = controller.config.broker.metrics_listen.rpartition(":")[0].strip("[]")
    return {
        **controller.ready(),
        "metrics": f"{metrics_host}:{controller.metrics_port}",
        "advertised": controller.endpoint,
        "pid": os.getpid(),
        "ha": controller.ha_address or None,
    }


async def serve(controller: BrokerController, ready_file: Path | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.warning("second %s: forcing exit", signal.Signals(signum).name)
            os._exit(EXIT_FORCED)
        log.info("%s received: stopping (send it again to force)", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    controller.on_stop = stop.set
    freezer = FreezeSurvivors(loop)
    try:
        await controller.start()
        # Everything alive now (modules, protobuf descriptors, the store's tables) lives as long
        # as the process: moved out of the collector's generations, a full collection only
        # walks what was allocated since. A full collection of ~45k start-up objects paused
        # the loop for 10-14 ms, a visible spike in end-to-end p99.
        gc.collect()
        gc.freeze()
        # What later bursts make (queues, topics): frozen after a long full collection.
        freezer.install()
        if ready_file is not None:
            await asyncio.to_thread(write_ready_file_blocking, ready_file, ready_info(controller))
        await stop.wait()
    finally:
        freezer.remove()
        await controller.shutdown()
    return EXIT_RESTART if controller.restart_reason else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_settings(args.config, os.environ, _flag_overrides(args))
    except ConfigError as exc:
        print(f"wharf-broker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=config.broker.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    keep_large_buffers_on_heap()  # send batches and pull replies: no page faults per buffer
    soft, _ = raise_open_file_limit()
    log.info("open-file limit %d (connections, queue and index files each hold one)", soft)
    controller = BrokerController(config)
    ready_file = Path(args.ready_file) if args.ready_file else None
    try:
        code = uvloop.run(serve(controller, ready_file))
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    except Exception:
        log.exception("broker failed")
        return 1
    if code == EXIT_RESTART:
        # Controller mode: a fresh process (same pid, arguments and environment) recovers
        # from disk as a replica; what a master kept in memory (pop, timers) is rebuilt there.
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
        logging.shutdown()
        os.execv(sys.executable, [sys.executable, "-m", "wharf.broker", *(argv or sys.argv[1:])])
    return code


if __name__ == "__main__":
    sys.exit(main())
