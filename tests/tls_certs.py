"""A throw-away certificate authority for the TLS tests and the TLS benchmark (``cryptography``).

    ca = CertAuthority.create(tmp_path / "ca", "test-ca")
    server = ca.issue(tmp_path / "server", "127.0.0.1", server=True)   # .cert, .key paths
    client = ca.issue(tmp_path / "client", "client-a", server=False)

A CA (CA:TRUE) signs server certificates (SAN 127.0.0.1 + localhost, serverAuth) and client
certificates (clientAuth): what an operator's PKI gives a broker and its clients, unlike the
broker's generated development pair.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertAuthority:
    cert: Path
    key_obj: ec.EllipticCurvePrivateKey
    cert_obj: x509.Certificate

    @classmethod
    def create(cls, directory: Path, name: str = "wharf-test-ca") -> CertAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=91))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        path = directory / "ca.crt"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(path, key, cert)

    def issue(
        self,
        directory: Path,
        common_name: str,
        *,
        server: bool,
        names: tuple[str, ...] = ("127.0.0.1", "localhost"),
    ) -> Issued:
        """A certificate signed by this CA; a server's SubjectAlternativeName is ``names``."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert_obj.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=90))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(name) for name in names]),
                critical=False,
            )
        cert = builder.sign(self.key_obj, hashes.SHA256())
        issued = Issued(directory / f"{common_name}.crt", directory / f"{common_name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(_key_pem(key))
        issued.key.chmod(0o600)
        return issued
