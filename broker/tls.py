"""The broker's TLS material: certificate, key and (mutual TLS) client CA bundle.

``load_server_tls_blocking(broker, store_root)`` is called once at start, in a thread:

- paths: ``tlsCertPath`` / ``tlsKeyPath``, by default ``<store>/config/tls/broker.crt`` and
  ``broker.key``;
- both files missing: a development pair is generated there (``wharf.broker.certs``: the
  certificate signed by a one-off CA whose key is discarded, the file holding both; SAN = the
  listen, tlsListen and advertised hosts plus localhost, 127.0.0.1 and ::1) and a WARNING says
  so: fine for development, clients are given the certificate file as their CA bundle;
- one of the two missing, an unreadable file or a key that does not match the certificate:
  ``TlsError`` naming the setting and path (the broker does not start);
- ``tlsClientAuth = require``: ``tlsTrustCertPath`` is read, and gRPC refuses a handshake
  without a client certificate signed by one of its CAs.

The certificate's SHA-256 fingerprint and expiry are logged at every start (a WARNING within
``EXPIRY_WARNING_DAYS``, 30, of expiry or after it). Replaced files are picked up without a
restart (``wharf.broker.tls_reload``). Plaintext and TLS cannot share a port in
grpcio: the controller binds ``listen`` TLS-only, or ``tlsListen`` as a second port.
"""

from __future__ import annotations

import datetime
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from wharf.broker.certs import fingerprint_sha256, generate_development_pair_blocking
from wharf.broker.config import BrokerConfig

log = logging.getLogger("broker")
EXPIRY_WARNING_DAYS = 30
DEFAULT_CERT_NAME = "broker.crt"
DEFAULT_KEY_NAME = "broker.key"


class TlsError(RuntimeError):
    """TLS material that cannot be used; the message names the setting and the file."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert_path: Path
    key_path: Path
    trust_path: Path | None  # tlsTrustCertPath when tlsClientAuth = require
    cert_pem: bytes
    key_pem: bytes = field(repr=False)  # never in a log line or traceback
    trust_pem: bytes | None  # client CA bundle when tlsClientAuth = require
    fingerprint: str
    not_after: datetime.datetime
    generated: bool  # the development pair was made at this start

    def certificate_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(self.key_pem, self.cert_pem)], root_certificates=self.trust_pem
        )


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


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{setting}: cannot read {path}: {exc.strerror}") from None


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


def read_server_tls_blocking(
    cert_path: Path, key_path: Path, trust_path: Path | None, generated: bool = False
) -> ServerTls:
    """Read and check the files (TlsError naming the setting when they cannot serve)."""
    if not cert_path.exists() or not key_path.exists():
        missing, setting = (
            (cert_path, "tlsCertPath") if not cert_path.exists() else (key_path, "tlsKeyPath")
        )
        raise TlsError(
            f"{setting}: {missing} does not exist while its pair does; provide both (or "
            "neither, to have a development pair generated)"
        )
    cert_pem = _read(cert_path, "tlsCertPath")
    key_pem = _read(key_path, "tlsKeyPath")
    not_after = _check_pair(cert_pem, key_pem, cert_path, key_path)
    trust_pem = None
    if trust_path is not None:
        trust_pem = _read(trust_path, "tlsTrustCertPath")
        try:
            x509.load_pem_x509_certificates(trust_pem)
        except ValueError:
            raise TlsError(f"tlsTrustCertPath: {trust_path} holds no PEM certificate") from None
    return ServerTls(
        cert_path, key_path, trust_path, cert_pem, key_pem, trust_pem,
        fingerprint_sha256(cert_pem), not_after, generated,
    )  # fmt: skip


def _check_pair(
    cert_pem: bytes, key_pem: bytes, cert_path: Path, key_path: Path
) -> datetime.datetime:
    """The certificate's expiry; TlsError when either file does not parse or they differ."""
    try:
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
    except ValueError:
        raise TlsError(f"tlsCertPath: {cert_path} holds no PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise TlsError(f"tlsKeyPath: {key_path} is not an unencrypted PEM private key") from None
    spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise TlsError(f"tlsKeyPath: {key_path} is not the key of the certificate {cert_path}")
    return cert.not_valid_after_utc


def log_certificate(tls: ServerTls) -> None:
    if tls.generated:
        log.warning(
            "TLS: generated a development certificate %s (key %s, mode 0600), signed by a "
            "one-off CA whose key was discarded; clients trust this file as their CA bundle; "
            "use a certificate of your own CA in production", tls.cert_path, tls.key_path,
        )  # fmt: skip
    log.info("TLS certificate %s SHA-256 fingerprint %s, valid until %s",
             tls.cert_path, tls.fingerprint, tls.not_after.isoformat())  # fmt: skip
    left = tls.not_after - datetime.datetime.now(datetime.UTC)
    if left < datetime.timedelta(days=EXPIRY_WARNING_DAYS):
        log.warning("TLS certificate %s expires %s (%s)", tls.cert_path, tls.not_after.isoformat(),
                    "already expired" if left.total_seconds() < 0 else f"in {left.days} days")  # fmt: skip
