"""How a client reaches Wharf, as one value: ``Connection``.

    conn = Connection("broker:8081", access_key="ak", secret_key="sk", tls=tls_config(ca_file="ca.pem"))
    async with Producer(connection=conn) as producer, Admin(connection=conn) as admin: ...

Every SDK client (``Producer``, ``PushConsumer``, ``PullConsumer``, ``Admin``) takes
``connection=``; the CLI, the console and the Spark connector build one from their options and
hand it on. The keyword arguments the clients took before (``endpoints`` positionally,
``namesrv``, ``access_key``, ``secret_key``, ``tls``, ``ca_file``, ``cert_file``, ``key_file``,
``namesrv_tls``: ``ConnectionOptions``) still work: ``connection_of`` turns them into the same
Connection (``Connection.build``). Give one or the other, not both.

Defaults, as before: ``access_key`` / ``secret_key`` None means the environment's
``WHARF_ACCESS_KEY`` / ``WHARF_SECRET_KEY``, read when a channel is opened (neither set:
unsigned calls); ``""`` means unsigned whatever the environment says. ``Connection.from_env``
reads the CLI's variables (``WHARF_ENDPOINTS``, ``NAMESRV_ADDR``, ``NAMESRV_TLS``, the keys,
``WHARF_TLS``, ``WHARF_CA_FILE``, ``WHARF_CERT_FILE``, ``WHARF_KEY_FILE``) once, keys included.
Keepalive is not here: every channel takes it from ``wharf.keepalive``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import grpc
from wharf.client.auth import Credentials, resolve_credentials
from wharf.client.channel import (
    DEFAULT_ENDPOINTS,
    TlsConfig,
    open_channel,
    open_sync_channel,
    tls_config,
)
from wharf.client.errors import InvalidArgumentError

_TRUE = ("1", "true", "yes", "on")


class ConnectionOptions(TypedDict, total=False):
    """The connection keyword arguments every client still accepts (``Connection.build``'s)."""

    namesrv: str | None
    access_key: str | None
    secret_key: str | None
    tls: bool | TlsConfig | None
    ca_file: str | Path | None
    cert_file: str | Path | None
    key_file: str | Path | None
    namesrv_tls: bool


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and how to dial: one broker (``endpoints``, ``host:port``, ``wire://host:port``
    for the wire port) or a cluster's NameServers (``namesrv``, ``"host:port;host2:port2"``,
    which wins over ``endpoints``); the keys that sign every call (None: the environment's
    at dial time, ``""``: unsigned); ``tls`` (a ``TlsConfig``, ``True`` for the system roots,
    None/False for plaintext) for the brokers, and for the NameServers too with
    ``namesrv_tls``. Immutable and comparable; the secret and the TLS key are never in its
    repr; picklable (PEM bytes, not paths)."""

    endpoints: str = DEFAULT_ENDPOINTS
    namesrv: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: TlsConfig | None = None
    namesrv_tls: bool = False

    def __post_init__(self) -> None:
        tls: object = self.tls
        if tls is True:
            object.__setattr__(self, "tls", TlsConfig())
        elif tls is False:
            object.__setattr__(self, "tls", None)
        elif tls is not None and not isinstance(tls, TlsConfig):
            raise InvalidArgumentError(f"tls must be a TlsConfig, True or None, got {tls!r}")
        if not self.namesrv:
            object.__setattr__(self, "namesrv", None)
        if not self.endpoints:
            object.__setattr__(self, "endpoints", DEFAULT_ENDPOINTS)

    # ------------------------------------------------------------------ building one
    @classmethod
    def build(
        cls,
        endpoints: str | None = None,
        *,
        namesrv: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        tls: bool | TlsConfig | None = False,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
        namesrv_tls: bool = False,
    ) -> Connection:
        """From the clients' keyword arguments: the PEM files are read now
        (``wharf.client.channel.tls_config``; InvalidArgumentError naming a bad one)."""
        return cls(
            endpoints or DEFAULT_ENDPOINTS,
            namesrv or None,
            access_key,
            secret_key,
            tls_config(tls, ca_file, cert_file, key_file),
            namesrv_tls,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Connection:
        """From the variables the ``wharf`` command reads (module docstring), keys resolved
        now (``""`` when unset: unsigned, whatever the environment says later)."""
        env = os.environ if env is None else env

        def flag(name: str) -> bool:
            return env.get(name, "").strip().lower() in _TRUE

        return cls.build(
            env.get("WHARF_ENDPOINTS") or None,
            namesrv=env.get("NAMESRV_ADDR") or None,
            tls=flag("WHARF_TLS"),
            ca_file=env.get("WHARF_CA_FILE") or None,
            cert_file=env.get("WHARF_CERT_FILE") or None,
            key_file=env.get("WHARF_KEY_FILE") or None,
            namesrv_tls=flag("NAMESRV_TLS"),
        ).resolved(env)

    def resolved(self, env: Mapping[str, str] | None = None) -> Connection:
        """This connection with keys taken from ``env`` (the process environment) now where
        they were left to it: for a value that travels (Spark pickles it to executors)."""
        credentials = resolve_credentials(self.access_key, self.secret_key, env)
        if credentials is None:
            return replace(self, access_key="", secret_key="")
        return replace(self, access_key=credentials.access_key, secret_key=credentials.secret_key)

    def to(self, address: str) -> Connection:
        """The same keys and TLS, dialing the one broker at ``address`` (no NameServers): a
        cluster client's per-broker clients."""
        return replace(self, endpoints=address, namesrv=None, namesrv_tls=False)

    # ------------------------------------------------------------------ reading one
    @property
    def credentials(self) -> Credentials | None:
        """The keys that sign calls now (arguments, else the environment); None: unsigned."""
        return resolve_credentials(self.access_key, self.secret_key)

    @property
    def namesrv_tls_config(self) -> TlsConfig | None:
        """TLS to the NameServers: the brokers' with ``namesrv_tls``, else plaintext."""
        return self.tls if self.namesrv_tls else None

    # ------------------------------------------------------------------ dialing
    def open_channel(
        self, address: str | None = None, *, dedicated: bool = False
    ) -> grpc.aio.Channel:
        """A grpc.aio channel to ``address`` (default: ``endpoints``), through
        ``wharf.client.channel.open_channel``."""
        return open_channel(
            address or self.endpoints,
            dedicated=dedicated,
            tls=self.tls,
            access_key=self.access_key,
            secret_key=self.secret_key,
        )

    def open_namesrv_channel(self, address: str) -> grpc.aio.Channel:
        """A grpc.aio channel to one NameServer (TLS with ``namesrv_tls``; signed alike)."""
        return open_channel(
            address,
            tls=self.namesrv_tls_config,
            access_key=self.access_key,
            secret_key=self.secret_key,
        )

    def open_sync_channel(
        self,
        address: str,
        options: Sequence[tuple[str, Any]] = (),
        *,
        namesrv: bool = False,
    ) -> grpc.Channel:
        """A blocking channel (the Spark connector's) to a broker, or to a NameServer with
        ``namesrv``, through ``wharf.client.channel.open_sync_channel``."""
        return open_sync_channel(
            address,
            options,
            tls=self.namesrv_tls_config if namesrv else self.tls,
            credentials=self.credentials,
        )


def connection_of(
    endpoints: str | Connection | None,
    connection: Connection | None,
    options: Mapping[str, Any],
) -> Connection:
    """A client's Connection: ``connection`` (or a Connection given in the ``endpoints``
    position), else one built from the old keyword arguments (``options``, ``endpoints``)."""
    if isinstance(endpoints, Connection) and connection is None:
        endpoints, connection = None, endpoints
    if connection is None:
        assert not isinstance(endpoints, Connection)
        return Connection.build(endpoints, **options)
    if not isinstance(connection, Connection):
        raise InvalidArgumentError(f"connection must be a Connection, got {connection!r}")
    if endpoints is not None or options:
        given = sorted([*options, *(["endpoints"] if endpoints is not None else [])])
        raise InvalidArgumentError(
            f"give connection= or the connection arguments ({', '.join(given)}), not both"
        )
    return connection


__all__ = ["Connection", "ConnectionOptions", "connection_of"]
