"""``wharf-probe``: ask a broker's standard gRPC health service whether it serves.

    wharf-probe [--endpoint HOST:PORT] [--timeout S] [--service NAME]

Prints the serving status and exits 0 only for SERVING: 1 for any other answer (NOT_SERVING
while the broker drains at shutdown, SERVICE_UNKNOWN), 2 when the broker cannot be reached
in time. Made for Docker's HEALTHCHECK, where the image has no grpcurl.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEFAULT_ENDPOINT = "127.0.0.1:8081"
EXIT_SERVING, EXIT_NOT_SERVING, EXIT_UNREACHABLE = 0, 1, 2


def check(endpoint: str, timeout: float, service: str = "") -> tuple[int, str]:
    """One health Check call: (exit code, text to print)."""
    with grpc.insecure_channel(endpoint) as channel:
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
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    host, sep, port = args.endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        parser.error(f"--endpoint must be HOST:PORT, got {args.endpoint!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    code, text = check(args.endpoint, args.timeout, args.service)
    print(text, file=sys.stdout if code == EXIT_SERVING else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
