"""Development certificates (``cryptography``), written atomically.

``generate_development_pair_blocking(cert_path, key_path, hosts)`` makes an ECDSA P-256 key and its
certificate, valid ``DEFAULT_DAYS`` (365) days from one hour ago (clock skew), with
SubjectAlternativeName = ``hosts`` plus ``localhost``, ``127.0.0.1`` and ``::1`` (IP literals
as IP entries, names as DNS entries), CA:FALSE, extendedKeyUsage serverAuth. It is signed by a
one-off CA whose private key is discarded at once (nothing else can ever be signed by it), and
the certificate file holds both: the chain the broker presents, and the bundle a client
trusts (``ca_file=<store>/config/tls/broker.crt``). Each file is written to ``<name>.tmp``
(the key created with mode 0600 before a byte is written), fsynced and renamed, key first: a
reader never sees half a file. Blocking: call it before the event loop starts or in a thread.

Also a command for deployments that want the pair before the first start (docker-compose
secrets)::

    python -m wharf.broker.kit.tls.certs --cert deploy/secrets/broker.crt \\
        --key deploy/secrets/broker.key --host broker --host localhost
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import ipaddress
import os
import ssl
import sys
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 365
ALWAYS_HOSTS = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("", "0.0.0.0", "::")


def san_hosts(hosts: Iterable[str]) -> list[str]:
    """``hosts`` without wildcards or duplicates, followed by the loopback names, in order."""
    seen: dict[str, None] = {}
    for host in (*hosts, *ALWAYS_HOSTS):
        host = host.strip().strip("[]")
        if host not in _WILDCARDS:
            seen.setdefault(host, None)
    return list(seen)


# digitalSignature only: what an ECDHE-ECDSA TLS server key does.
_SERVER_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _name(organization: str, common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),  # the X.509 bound
        ]
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def build_development_pair(hosts: Iterable[str], days: int = DEFAULT_DAYS) -> tuple[bytes, bytes]:
    """(certificate chain PEM, PKCS#8 private key PEM) for ``san_hosts(hosts)``.

    The chain is the server certificate followed by the one-off CA that signed it, whose key
    is dropped here. Trusting the chain file trusts that CA: a self-signed CA:FALSE
    certificate alone is refused by gRPC's default root store (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH,
    how the official clients are pointed at a private CA), a CA:TRUE one used as the server's
    own certificate by webpki (the Rust client)."""
    names = san_hosts(hosts)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Wharf development CA", f"Wharf development CA {names[0]}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Wharf development", names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_SERVER_KEY_USAGE, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return _pem(cert) + _pem(ca_cert), key_pem


def write_atomic_blocking(path: Path, data: bytes, mode: int) -> None:
    """tmp (created with ``mode``) + fsync + rename + directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def generate_development_pair_blocking(
    cert_path: Path, key_path: Path, hosts: Iterable[str], days: int = DEFAULT_DAYS
) -> bytes:
    """Write a new pair (key mode 0600, certificate 0644); returns the certificate PEM."""
    cert_pem, key_pem = build_development_pair(hosts, days)
    for path in (cert_path, key_path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic_blocking(key_path, key_pem, 0o600)
    write_atomic_blocking(cert_path, cert_pem, 0o644)
    return cert_pem


def fingerprint_sha256(cert_pem: bytes) -> str:
    """SHA-256 of the first certificate's DER, as ``AB:CD:...`` (what ``openssl x509
    -fingerprint -sha256`` prints)."""
    text = cert_pem.decode("ascii", errors="replace")
    end = text.find("-----END CERTIFICATE-----")
    if end < 0:
        raise ValueError("no PEM certificate found")
    der = ssl.PEM_cert_to_DER_cert(text[: end + len("-----END CERTIFICATE-----")])
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wharf.broker.kit.tls.certs",
        description="Write a development certificate (signed by a one-off CA) and key for tlsEnable.",
    )
    parser.add_argument("--cert", required=True, type=Path, help="certificate PEM to write")
    parser.add_argument("--key", required=True, type=Path, help="private key PEM to write")
    parser.add_argument(
        "--host", action="append", default=[], help="a name or IP clients dial (repeatable)"
    )
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help="validity in days")
    parser.add_argument(
        "--key-mode",
        type=lambda text: int(text, 8),
        default=0o600,
        help="octal file mode of the key (default 600; a container user other than the "
        "file's owner needs it readable, e.g. 644 on a single-user development machine)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be >= 1")
    for path in (args.cert, args.key):
        if path.exists() and not args.force:
            print(f"{path} exists (use --force to replace it)", file=sys.stderr)
            return 1
    cert_pem = generate_development_pair_blocking(args.cert, args.key, args.host, args.days)
    os.chmod(args.key, args.key_mode)
    print(f"wrote {args.cert} and {args.key}; SHA-256 fingerprint {fingerprint_sha256(cert_pem)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
