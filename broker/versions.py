"""The versions a broker reports (wharf.v1's GetBrokerStatus, remoting's GET_BROKER_RUNTIME_INFO),
read once at import: package metadata is a file read, which fails with EMFILE when the broker is
at its open-file limit -- exactly when an operator asks for the status."""

from __future__ import annotations

from importlib import metadata

__all__ = ["VERSIONS"]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


VERSIONS = {name: _version(name) for name in ("wharf", "uvloop", "protobuf")}
