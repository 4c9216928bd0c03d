"""``wharf console``: start the web console (a separate process; uvicorn serving the ASGI app).

    wharf console --endpoints 127.0.0.1:8081 --listen 127.0.0.1:8082
    wharf console --endpoints broker:8081 --listen 0.0.0.0:8082 --auth-token "$TOKEN"

Options come after the subcommand: ``--endpoints HOST:PORT[;HOST:PORT...]`` (default: the
global ``--endpoints``, env ``WHARF_ENDPOINTS``), ``--listen HOST:PORT`` (default
127.0.0.1:8082), ``--auth-token TOKEN`` (env ``WHARF_CONSOLE_TOKEN``) or ``--auth-token-file
PATH`` (env ``WHARF_CONSOLE_TOKEN_FILE``: the token is the file's first line, e.g. a docker
secret), ``--basic-auth USER:PASSWORD`` (env ``WHARF_CONSOLE_BASIC_AUTH``), ``--allowed-host
NAME`` (repeatable, env ``WHARF_CONSOLE_ALLOWED_HOSTS``: Host names served besides the
``--listen`` host and loopback), ``--sample-interval S`` (the live chart's sampling, 2 s). A
non-loopback ``--listen`` without credentials exits at once with status 2 and a message naming
``--auth-token`` and ``--basic-auth``; so does a malformed address or ``--allowed-host``. The
global TLS and access-key options apply to the console's broker connections.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import Any

from wharf.client.cli.output import Output

DEFAULT_LISTEN = "127.0.0.1:8082"


def add_parsers(sub: Any) -> None:
    parser = sub.add_parser(
        "console",
        help="web console: brokers, topics, groups and lag, message search and trace",
        description="Serve the Wharf web console. It binds loopback by default; a public "
        "--listen needs --auth-token or --basic-auth.",
    )
    parser.add_argument(
        "--endpoints",
        dest="console_endpoints",
        default=None,
        metavar="HOST:PORT[;HOST:PORT]",
        help="brokers to show (default: the global --endpoints / WHARF_ENDPOINTS)",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="HTTP address to serve on (default %(default)s, loopback)",
    )
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("WHARF_CONSOLE_TOKEN") or None,
        metavar="TOKEN",
        help="require this token: 'Authorization: Bearer TOKEN', or the browser's login form "
        "(/login) once (env WHARF_CONSOLE_TOKEN)",
    )
    parser.add_argument(
        "--auth-token-file",
        default=os.environ.get("WHARF_CONSOLE_TOKEN_FILE") or None,
        metavar="PATH",
        help="read the token from this file, e.g. a docker secret (env WHARF_CONSOLE_TOKEN_FILE)",
    )
    parser.add_argument(
        "--basic-auth",
        default=os.environ.get("WHARF_CONSOLE_BASIC_AUTH") or None,
        metavar="USER:PASSWORD",
        help="require HTTP basic auth with these credentials (env WHARF_CONSOLE_BASIC_AUTH)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=_env_list("WHARF_CONSOLE_ALLOWED_HOSTS"),
        metavar="NAME",
        help="a Host name the console answers to besides its --listen host (and loopback): "
        "the name a proxy or DNS gives it; repeatable (env WHARF_CONSOLE_ALLOWED_HOSTS, "
        "comma-separated). Other names get 421 (DNS rebinding)",
    )
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between broker samples for the live rates (default %(default)s)",
    )
    parser.set_defaults(run=run)


async def run(args: argparse.Namespace, out: Output) -> int:
    # Imported here: the other commands need neither starlette nor uvicorn.
    try:
        import uvicorn
        from wharf.client.console.app import build_app
    except ImportError as exc:
        raise ValueError(
            f"wharf console needs the 'console' extra ({exc.name} is missing): "
            "pip install 'wharf[console]'"
        ) from None
    from wharf.client.cli.cluster_commands import connection_of_args
    from wharf.client.console.brokers import BrokerPool, split_endpoints
    from wharf.client.console.context import Console
    from wharf.client.console.security import Guard, check_bind, split_listen

    host, port = split_listen(args.listen)
    if args.auth_token_file:
        args.auth_token = read_token(args.auth_token_file)
    check_bind(host, auth_token=args.auth_token, basic_auth=args.basic_auth)
    if args.sample_interval <= 0:
        raise ValueError("--sample-interval must be > 0")
    endpoints = split_endpoints(args.console_endpoints or args.endpoints)
    # One Connection: these brokers, with the global TLS and key options.
    connection = replace(connection_of_args(args), endpoints=";".join(endpoints))
    guard = Guard(
        auth_token=args.auth_token,
        basic_auth=args.basic_auth,
        listen_host=host,
        allowed_hosts=args.allowed_host,
    )
    console = Console(
        BrokerPool(connection=connection),
        guard,
        sample_interval_s=args.sample_interval,
    )
    config = uvicorn.Config(
        build_app(console),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    print(
        f"wharf console on http://{args.listen} for {', '.join(endpoints)}",
        file=sys.stderr,
        flush=True,
    )
    await server.serve()
    return 0


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def read_token(path: str) -> str:
    """The token in ``path`` (its first line, stripped); ValueError when unreadable or empty."""
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
    except OSError as exc:
        raise ValueError(f"--auth-token-file {path}: {exc.strerror or exc}") from None
    if not token:
        raise ValueError(f"--auth-token-file {path} is empty")
    return token
