"""TLS material of a Wharf server (broker or NameServer) that needs no server settings: a
certificate, its key and (mutual TLS) a client CA bundle read and checked
(``read_server_tls_blocking``: ``TlsError`` naming the setting and the file when they cannot
serve), their fingerprint and expiry logged (a WARNING within ``EXPIRY_WARNING_DAYS``, 30, of
expiry). ``wharf.broker.tls_settings`` finds the files from the broker's settings (generating a
development pair), ``wharf.broker.kit.tls.reload`` serves replaced files without a restart; the
NameServer uses both through this module and ``wharf.broker.kit.tls.certs``.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from wharf.broker.kit.tls.certs import fingerprint_sha256

log = logging.getLogger("broker")
EXPIRY_WARNING_DAYS = 30


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


def _read(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{setting}: cannot read {path}: {exc.strerror}") from None


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
