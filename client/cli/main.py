"""``wharf``: the command line for a Wharf broker (what RocketMQ's mqadmin does for one broker).

    wharf topic create orders --queues 4
    echo hello | wharf send orders
    wharf consume orders --follow --json
    wharf group progress billing

Global options: ``--endpoints HOST:PORT`` (env ``WHARF_ENDPOINTS``, default 127.0.0.1:8081),
``--namesrv HOST:PORT;HOST:PORT`` (env ``NAMESRV_ADDR``: a cluster's NameServers instead of
one broker: ``wharf cluster list``, ``topic create --cluster``, sends spread over the groups,
admin writes on every master holding the topic or group, reads merged over the groups;
``--namesrv-tls`` / ``NAMESRV_TLS``: the NameServers too over TLS),
``--access-key`` / ``--secret-key`` (env ``WHARF_ACCESS_KEY`` / ``WHARF_SECRET_KEY``: every
call is signed for a broker with aclEnable; prefer the environment, a secret on the command
line is visible to other local users), ``--json`` (one JSON document per line on stdout; errors as JSON on
stderr) and TLS: ``--tls`` (env ``WHARF_TLS``), ``--ca-file`` (``WHARF_CA_FILE``, implies
TLS), ``--cert-file`` / ``--key-file`` (``WHARF_CERT_FILE`` / ``WHARF_KEY_FILE``, mutual
TLS). They make one ``wharf.client.connection.Connection`` (``args.connection``) that every
command's clients take. Exit codes are listed in :mod:`wharf.client.cli.exit_codes`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import uvloop
from wharf.client.auth import ACCESS_KEY_ENV, SECRET_KEY_ENV
from wharf.client.channel import DEFAULT_ENDPOINTS, parse_endpoints
from wharf.client.cli import (
    acl_commands,
    cluster_commands,
    group_commands,
    message_commands,
    topic_commands,
    tx_commands,
)
from wharf.client.cli.exit_codes import INTERRUPTED, USAGE, exit_code_for
from wharf.client.cli.output import Output
from wharf.client.connection import Connection
from wharf.client.errors import InvalidArgumentError, WharfError
from wharf.store.fast.malloc import keep_large_buffers_on_heap


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wharf",
        description="Command line for the Wharf message broker.",
        epilog="exit codes: 0 ok, 1 broker error, 2 usage, 3 unavailable, 4 not found, "
        "5 already exists, 6 access refused (unauthenticated or permission denied), "
        "130 interrupted",
    )
    parser.add_argument(
        "--endpoints",
        default=os.environ.get("WHARF_ENDPOINTS", DEFAULT_ENDPOINTS),
        help="broker HOST:PORT (env WHARF_ENDPOINTS; default %(default)s)",
    )
    parser.add_argument(
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", ""),
        help="NameServers HOST:PORT[;HOST:PORT] of a cluster (env NAMESRV_ADDR) instead of "
        "--endpoints: every command over the cluster's broker groups",
    )
    parser.add_argument(
        "--namesrv-tls",
        action="store_true",
        default=os.environ.get("NAMESRV_TLS", "").lower() in ("1", "true", "yes", "on"),
        help="dial the NameServers over TLS too, with the TLS options below (env "
        "NAMESRV_TLS=true; a NameServer with tlsEnable)",
    )
    parser.add_argument(
        "--access-key",
        help=f"sign requests for an aclEnable broker (env {ACCESS_KEY_ENV})",
    )
    parser.add_argument(
        "--secret-key", help=f"the access key's secret (env {SECRET_KEY_ENV}; prefer the env)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    tls = parser.add_argument_group("TLS (a broker with tlsEnable)")
    tls.add_argument(
        "--tls",
        dest="tls_flag",
        action="store_true",
        default=os.environ.get("WHARF_TLS", "").lower() in ("1", "true", "yes", "on"),
        help="connect over TLS, trusting the system roots unless --ca-file (env WHARF_TLS=true)",
    )
    tls.add_argument(
        "--ca-file",
        default=os.environ.get("WHARF_CA_FILE"),
        metavar="PEM",
        help="CA bundle to trust (implies --tls; env WHARF_CA_FILE), e.g. the broker's "
        "development <store>/config/tls/broker.crt",
    )
    tls.add_argument(
        "--cert-file",
        default=os.environ.get("WHARF_CERT_FILE"),
        metavar="PEM",
        help="client certificate for mutual TLS (env WHARF_CERT_FILE)",
    )
    tls.add_argument(
        "--key-file",
        default=os.environ.get("WHARF_KEY_FILE"),
        metavar="PEM",
        help="client private key for mutual TLS (env WHARF_KEY_FILE)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    topic_commands.add_parsers(sub)
    group_commands.add_parsers(sub)
    message_commands.add_parsers(sub)
    tx_commands.add_parsers(sub)
    cluster_commands.add_parsers(sub)
    acl_commands.add_parsers(sub)
    from wharf.client.bench.cli import add_parsers as add_bench_parsers

    add_bench_parsers(sub)
    from wharf.client.console.cli import add_parsers as add_console_parsers

    add_console_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with 2 on usage errors
    out = Output(args.json)
    try:
        parse_endpoints(args.endpoints)
        # How every command's client connects: one Connection from the global options, handed
        # to every Producer, Admin, ... (keys left None fall back to the environment's).
        args.connection = Connection.build(
            args.endpoints,
            namesrv=args.namesrv or None,
            access_key=args.access_key,
            secret_key=args.secret_key,
            tls=args.tls_flag,
            ca_file=args.ca_file,
            cert_file=args.cert_file,
            key_file=args.key_file,
            namesrv_tls=args.namesrv_tls,
        )
        keep_large_buffers_on_heap()  # send batches and pull replies: no page faults per buffer
        # uvloop, as the broker: the CLI's clients (and `wharf bench`) spend much of their
        # time in task switches and callbacks, which it runs ~2x cheaper than asyncio's loop.
        return uvloop.run(args.run(args, out))
    except (ValueError, InvalidArgumentError) as exc:
        if isinstance(exc, WharfError) and exc.code == "INVALID_ARGUMENT" and _from_broker(exc):
            out.error(exc.code, str(exc))
            return exit_code_for(exc)
        out.error("USAGE", str(exc))
        return USAGE
    except WharfError as exc:
        out.error(exc.code, str(exc))
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        return 0


def _from_broker(exc: WharfError) -> bool:
    return getattr(exc, "from_broker", False)


if __name__ == "__main__":
    sys.exit(main())
