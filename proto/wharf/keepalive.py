"""HTTP/2 keepalive: the one pairing of what gRPC clients send and what Wharf's servers accept.

Every client-side gRPC channel (the SDK's ``open_channel``, hence the CLI and the console, and
the Spark connector's channels) takes ``client_options()``; the broker and the NameServer take
``server_options()``. Both derive from one period, so they cannot drift apart again.

Why: gRPC core's servers police pings (chttp2 ping abuse policy). A ping arriving sooner than
``grpc.http2.min_ping_interval_without_data_ms`` after the previous one (5 min by default;
2 hours on a connection without calls unless the server sets
``grpc.keepalive_permit_without_calls``) is a strike, and after ``grpc.http2.max_ping_strikes``
(2) the server sends GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and drops the connection with
every call on it. Strikes are reset only when the server sends headers or data, so a parked
long poll or route watch (no data for minutes) collects one strike per client ping. The C name
of that setting is GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS but its key has no
"recv" in it: the broker once set ``grpc.http2.min_recv_ping_interval_without_data_ms``, which
gRPC ignores silently, kept the 5 min default and answered the SDK's 30 s pings with GOAWAY.

The numbers (``KEEPALIVE_TIME_MS`` = 30 s):

- client: a ping after 30 s without reads, with or without calls
  (``keepalive_permit_without_calls``: an idle producer learns of a dead connection before its
  next send), unlimited pings without data (``max_pings_without_data`` = 0: an idle connection
  sends no data, and gRPC would otherwise slow keepalive to one ping a minute after two), 20 s
  for the answer before the connection counts as dead;
- servers: pings accepted every 15 s (half the period, so a ping delayed by a busy loop followed
  by one on time is no strike), on connections without calls too, 2 strikes tolerated.

``WHARF_GRPC_KEEPALIVE_MS`` (milliseconds) replaces the period for a whole deployment (tests use
1 s): set the same value on brokers, NameServers and clients, or the servers accept the pings
of a shorter period as abuse.
"""

from __future__ import annotations

import os

KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 20_000
MAX_PING_STRIKES = 2
ENV = "WHARF_GRPC_KEEPALIVE_MS"


def keepalive_time_ms() -> int:
    """The client's ping period: ``KEEPALIVE_TIME_MS`` unless ``WHARF_GRPC_KEEPALIVE_MS`` says."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return KEEPALIVE_TIME_MS
    if not value.isdigit() or int(value) <= 0:
        raise ValueError(f"{ENV} must be a positive number of milliseconds, got {value!r}")
    return int(value)


def min_recv_ping_interval_ms() -> int:
    """The shortest gap between two pings a server accepts: half the client's period."""
    return keepalive_time_ms() // 2


def client_options() -> list[tuple[str, int]]:
    """Keepalive options of every client channel (see the module docstring)."""
    return [
        ("grpc.keepalive_time_ms", keepalive_time_ms()),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def server_options() -> list[tuple[str, int]]:
    """What a server must accept of ``client_options()`` (see the module docstring)."""
    return [
        ("grpc.keepalive_permit_without_calls", 1),
        # GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS (no "recv" in the key).
        ("grpc.http2.min_ping_interval_without_data_ms", min_recv_ping_interval_ms()),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ]
