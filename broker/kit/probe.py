"""``wharf-probe``: ask a broker's standard gRPC health service whether it serves.

    wharf-probe [--endpoint HOST:PORT] [--timeout S] [--service NAME]
                [--tls] [--ca-file PEM] [--cert-file PEM --key-file PEM] [--server-name NAME]

Prints the serving status and exits 0 only for SERVING: 1 for any other answer (NOT_SERVING
while the broker drains at shutdown, SERVICE_UNKNOWN), 2 when the broker cannot be reached
in time. Made for Docker's HEALTHCHECK, where the image has no grpcurl.

A broker with tlsEnable: ``--tls`` (env ``WHARF_PROBE_TLS=true``) trusts the system roots,
``--ca-file`` (``WHARF_PROBE_CA_FILE``, implies TLS) a PEM bundle such as the broker's
development certificate; ``--cert-file`` / ``--key-file`` (``WHARF_PROBE_CERT_FILE`` /
``WHARF_PROBE_KEY_FILE``) for a broker requiring mutual TLS; ``--server-name``
(``WHARF_PROBE_SERVER_NAME``) when the certificate does not name the dialled host (a container
probing 127.0.0.1 with a certificate for mq.example.com). An unreadable file exits 2.
A plaintext probe of a TLS port (or the reverse) is UNREACHABLE, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEFAULT_ENDPOINT = "127.0.0.1:8081"
EXIT_SERVING, EXIT_NOT_SERVING, EXIT_UNREACHABLE = 0, 1, 2


def _channel(
    endpoint: str, tls: grpc.ChannelCredentials | None, server_name: str | None
) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(endpoint)
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(endpoint, tls, options=options)


def tls_credentials(
    tls: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> grpc.ChannelCredentials | None:
    """None = plaintext; OSError for an unreadable file."""
    if not (tls or ca_file or cert_file):
        return None

    def read(path: str | None) -> bytes | None:
        return None if path is None else Path(path).read_bytes()

    return grpc.ssl_channel_credentials(read(ca_file), read(key_file), read(cert_file))


def check(
    endpoint: str,
    timeout: float,
    service: str = "",
    tls: grpc.ChannelCredentials | None = None,
    server_name: str | None = None,
) -> tuple[int, str]:
    """One health Check call (over TLS when ``tls`` is given, checking the certificate for
    ``server_name`` instead of the endpoint's host): (exit code, text to print)."""
    with _channel(endpoint, tls, server_name) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=timeout,
                wait_for_ready=True,  # ride out a broker still binding, up to the timeout
            )
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            detail = exc.details() or ""  # type: ignore[attr-defined]
            if code == grpc.StatusCode.NOT_FOUND:
                return EXIT_NOT_SERVING, f"SERVICE_UNKNOWN {service!r} at {endpoint}"
            return EXIT_UNREACHABLE, f"UNREACHABLE {endpoint}: {code.name} {detail}".rstrip()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return (EXIT_SERVING if status == "SERVING" else EXIT_NOT_SERVING), status


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="wharf-probe",
        description="Check a Wharf broker through the standard gRPC health service.",
    )
    parser.add_argument(
        "--endpoint",
        default=os.environ.get("WHARF_PROBE_ENDPOINT", DEFAULT_ENDPOINT),
        help=f"broker gRPC address HOST:PORT (default $WHARF_PROBE_ENDPOINT or {DEFAULT_ENDPOINT})",
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="seconds to wait for an answer (default 3)"
    )
    parser.add_argument(
        "--service", default="", help="service name to check (default '': the whole server)"
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        default=os.environ.get("WHARF_PROBE_TLS", "").lower() in ("1", "true", "yes", "on"),
        help="connect over TLS (default $WHARF_PROBE_TLS)",
    )
    for name, metavar, text in (
        ("ca-file", "PEM", "CA bundle to trust, implies --tls"),
        ("server-name", "NAME", "name the certificate must hold, when not the endpoint's host"),
        ("cert-file", "PEM", "client certificate (mutual TLS)"),
        ("key-file", "PEM", "client key (mutual TLS)"),
    ):
        env = "WHARF_PROBE_" + name.replace("-", "_").upper()
        parser.add_argument(
            f"--{name}", metavar=metavar, default=os.environ.get(env), help=f"{text} (${env})"
        )
    args = parser.parse_args(argv)
    if (args.cert_file is None) != (args.key_file is None):
        parser.error("--cert-file and --key-file go together")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    host, sep, port = args.endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        parser.error(f"--endpoint must be HOST:PORT, got {args.endpoint!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        tls = tls_credentials(args.tls, args.ca_file, args.cert_file, args.key_file)
    except OSError as exc:
        print(f"cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_UNREACHABLE
    code, text = check(args.endpoint, args.timeout, args.service, tls, args.server_name)
    print(text, file=sys.stdout if code == EXIT_SERVING else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
