"""TLS certificates replaced without a restart: gRPC's dynamic server credentials.

gRPC calls ``CertificateReloader.fetch`` before every new connection's handshake. It compares
the certificate, key and (mutual TLS) trust files' (inode, size, mtime) with what it last
loaded: three ``stat`` calls, a few microseconds next to a handshake's milliseconds. When one
changed it reads and checks them (``read_server_tls_blocking``: the key must match the
certificate) and hands the new pair to gRPC, which serves it from that handshake on; open
connections keep theirs. The new fingerprint and expiry are logged. A replacement that cannot
serve (half-written, mismatched, unreadable) keeps the current pair with one WARNING per file
change; the next change is tried again, so writing the key and then the certificate (or the
reverse) ends with the new pair. Nothing here raises into gRPC: an error would fail the
handshake of the client that triggered it.

Replace files atomically (write elsewhere, then rename over them) as cert-manager and certbot
do; ``tlsClientAuth`` itself cannot change without a restart.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import grpc
from wharf.broker.kit.tls.material import (
    ServerTls,
    TlsError,
    log_certificate,
    read_server_tls_blocking,
)

log = logging.getLogger("broker")

FileSignature = tuple[tuple[int, int, int] | None, ...]


def _signature(paths: tuple[Path, ...]) -> FileSignature:
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class CertificateReloader:
    def __init__(self, tls: ServerTls) -> None:
        self.current = tls
        self._paths = tuple(
            p for p in (tls.cert_path, tls.key_path, tls.trust_path) if p is not None
        )
        self._seen = _signature(self._paths)
        self._lock = threading.Lock()  # gRPC may call fetch from several threads

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.current.certificate_configuration(),
            self.fetch,  # type: ignore[arg-type]  # None = no change, per grpc's docs; the stubs omit it
            require_client_authentication=self.current.trust_pem is not None,
        )

    def refreshed(self) -> ServerTls:
        """The material in force after checking the files (the wire port's handshakes: gRPC
        calls ``fetch`` itself)."""
        self.fetch()
        return self.current

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed and can serve, else None (no change)."""
        try:
            with self._lock:
                seen = _signature(self._paths)
                if seen == self._seen:
                    return None
                self._seen = seen
                current = self.current
                try:
                    tls = read_server_tls_blocking(
                        current.cert_path, current.key_path, current.trust_path
                    )
                except TlsError as exc:
                    log.warning("TLS files changed but cannot serve, keeping certificate %s: %s",
                                current.fingerprint, exc)  # fmt: skip
                    return None
                if tls.cert_pem == current.cert_pem and tls.trust_pem == current.trust_pem:
                    return None  # touched, not changed
                self.current = tls
            log.info("TLS certificate reloaded (was %s)", current.fingerprint)
            log_certificate(tls)
            return tls.certificate_configuration()
        except Exception:  # never into gRPC's handshake
            log.exception("TLS certificate reload failed; keeping the current certificate")
            return None
