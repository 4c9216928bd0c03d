"""The broker's TLS material: certificate, key and (mutual TLS) client CA bundle.

``load_server_tls_blocking(broker, store_root)`` is called once at start, in a thread:

- paths: ``tlsCertPath`` / ``tlsKeyPath``, by default ``<store>/config/tls/broker.crt`` and
  ``broker.key``;
- both files missing: a development pair is generated there (``wharf.broker.kit.tls.certs``: the
  certificate signed by a one-off CA whose key is discarded, the file holding both; SAN = the
  listen, tlsListen and advertised hosts plus localhost, 127.0.0.1 and ::1) and a WARNING says
  so: fine for development, clients are given the certificate file as their CA bundle;
- one of the two missing, an unreadable file or a key that does not match the certificate:
  ``TlsError`` naming the setting and path (the broker does not start);
- ``tlsClientAuth = require``: ``tlsTrustCertPath`` is read, and gRPC refuses a handshake
  without a client certificate signed by one of its CAs.

The certificate's SHA-256 fingerprint and expiry are logged at every start (a WARNING within
``EXPIRY_WARNING_DAYS``, 30, of expiry or after it). Replaced files are picked up without a
restart (``wharf.broker.kit.tls.reload``); reading and checking the files is
``wharf.broker.kit.tls.material`` (settings-free, shared with the NameServer). Plaintext and TLS cannot share a port in
grpcio: the controller binds ``listen`` TLS-only, or ``tlsListen`` as a second port.
"""

from __future__ import annotations

import socket
from pathlib import Path

from wharf.broker.config import BrokerConfig
from wharf.broker.kit.tls.certs import generate_development_pair_blocking
from wharf.broker.kit.tls.material import (
    EXPIRY_WARNING_DAYS,
    ServerTls,
    TlsError,
    log_certificate,
    read_server_tls_blocking,
)

__all__ = [
    "EXPIRY_WARNING_DAYS",
    "ServerTls",
    "TlsError",
    "certificate_hosts",
    "load_server_tls_blocking",
    "log_certificate",
    "read_server_tls_blocking",
    "tls_paths",
]
DEFAULT_CERT_NAME = "broker.crt"
DEFAULT_KEY_NAME = "broker.key"


def tls_paths(broker: BrokerConfig, store_root: str | Path) -> tuple[Path, Path]:
    tls_dir = Path(store_root) / "config" / "tls"
    cert = Path(broker.tls_cert_path) if broker.tls_cert_path else tls_dir / DEFAULT_CERT_NAME
    key = Path(broker.tls_key_path) if broker.tls_key_path else tls_dir / DEFAULT_KEY_NAME
    return cert, key


def certificate_hosts(broker: BrokerConfig) -> list[str]:
    """Hosts clients may dial: listen, tlsListen, advertisedAddress (wildcards dropped by
    ``san_hosts``; a wildcard adds this machine's name)."""
    hosts = []
    for address in (broker.listen, broker.tls_listen, broker.advertised_address):
        if address:
            host = address.rpartition(":")[0].strip("[]")
            hosts.append(host)
            if host in ("0.0.0.0", "::", ""):
                hosts.append(socket.gethostname())
    return hosts


def load_server_tls_blocking(broker: BrokerConfig, store_root: str | Path) -> ServerTls:
    """The material at start (generating the development pair when both files are missing);
    logs the fingerprint and expiry."""
    cert_path, key_path = tls_paths(broker, store_root)
    generated = False
    if not cert_path.exists() and not key_path.exists():
        try:
            generate_development_pair_blocking(cert_path, key_path, certificate_hosts(broker))
        except OSError as exc:
            raise TlsError(
                f"tlsCertPath/tlsKeyPath: cannot write a development pair to {cert_path} and "
                f"{key_path}: {exc.strerror}"
            ) from None
        generated = True
    trust_path = Path(broker.tls_trust_cert_path) if broker.tls_client_auth == "require" else None
    tls = read_server_tls_blocking(cert_path, key_path, trust_path, generated)
    log_certificate(tls)
    return tls
