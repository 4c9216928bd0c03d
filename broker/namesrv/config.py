"""NameServer settings, resolved once at start as the broker's are: embedded defaults < TOML
file (RocketMQ's camelCase names) < ``WHARF_NAMESRV_<UPPER_SNAKE>`` environment < flags.
Unknown TOML keys and bad values raise ConfigError naming the setting (exit code 2).

Its own small loader: of the broker the NameServer imports only the kit both share
(broker/kit/), and nothing of the store (a separate failure domain with a tiny dependency set;
the import-linter contract holds it to that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wharf.broker.kit.toml_file import read_settings_file

ENV_PREFIX = "WHARF_NAMESRV_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """An invalid or unknown setting; the message names it."""


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    # listen: gRPC address (RocketMQ's NameServer port 9876; loopback unless told otherwise).
    listen: str = "127.0.0.1:9876"
    # remotingListen: the RocketMQ 4.x remoting port (HOST:PORT, port 0: a free one; "": off),
    # the namesrvAddr of 4.x clients: routes of every registered group with a remoting port.
    remoting_listen: str = ""
    # brokerNotActiveTimeoutMillis: a broker silent this long is dropped (RocketMQ 5's
    # controller default, 10 s; a broker whose connection breaks is dropped at once).
    broker_not_active_timeout_millis: int = 10_000
    # logLevel: DEBUG, INFO, WARNING, ERROR.
    log_level: str = "INFO"
    # aclEnable: every NameService call signed (RocketMQ 5's MQv2-HMAC-SHA1, as the broker's)
    # by an account of aclFile (plain_acl.yml, the brokers' format; reloaded within ~1 s):
    # BrokerSession needs an admin account, QueryRoute PUB or SUB on the topic, WatchRoutes
    # the same on each topic (admin for every topic), GetClusterInfo any account. The remoting
    # port checks RocketMQ 4's AccessKey/Signature extFields against the same accounts
    # (105: PUB or SUB on the topic, 206: admin, 106 and 101: any account).
    acl_enable: bool = False
    acl_file: str = ""
    # aclMaxClockSkew (ms): a signature's date may be this far from the NameServer's clock.
    acl_max_clock_skew: int = 900_000
    # tlsEnable: serve TLS only on ``listen`` with tlsCertPath / tlsKeyPath (both missing: a
    # development pair is generated there, as the broker does); replaced files are served
    # from the next handshake. tlsClientAuth = require: mutual TLS against tlsTrustCertPath.
    # The remoting port (remotingListen) is then TLS only too, with the same certificate.
    tls_enable: bool = False
    tls_cert_path: str = ""
    tls_key_path: str = ""
    tls_client_auth: str = "none"
    tls_trust_cert_path: str = ""
    # Connection bounds, the broker's settings and defaults (broker/README.md "Connection
    # bounds"): a NameServer is what every client dials first, so one that a flood of idle or
    # dribbling connections can fill takes routing from all. Remoting: idle after
    # serverChannelMaxIdleTimeSeconds (RocketMQ's 120 s), a frame begun must arrive within
    # frameReadTimeoutMs, at most maxConnectionsPerListener connections and
    # maxConnectionsPerAddress from one IP; gRPC: GOAWAY after connectionMaxIdleMs without a
    # call, the handshake within frameReadTimeoutMs, the connection cap. 0 = no limit.
    server_channel_max_idle_time_seconds: int = 120
    connection_max_idle_ms: int = 600_000
    frame_read_timeout_ms: int = 30_000
    max_connections_per_listener: int = 10_000
    max_connections_per_address: int = 1_000


def camel_name(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_FIELDS = {f.name: f for f in dataclasses.fields(NamesrvConfig)}
_BY_CAMEL = {camel_name(n): n for n in _FIELDS}


def _coerce(name: str, value: Any) -> Any:
    kind = type(_FIELDS[name].default)
    if kind is bool:
        if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off"):
            return False
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, str):
            try:
                value = int(value.strip(), 0)
            except ValueError:
                raise ValueError(f"expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"expected a positive integer, got {value!r}")
    elif not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if name == "listen" or (name == "remoting_listen" and value):
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"expected HOST:PORT, got {value!r}")
    if name == "log_level" and value not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    if name == "tls_client_auth" and value not in ("none", "require"):
        raise ValueError(f"expected none or require, got {value!r}")
    return value


def _check_together(config: NamesrvConfig) -> None:
    """Settings that need each other."""
    if config.acl_enable and not config.acl_file:
        raise ConfigError("aclEnable needs aclFile: the accounts file (plain_acl.yml)")
    if config.tls_enable and not (config.tls_cert_path and config.tls_key_path):
        raise ConfigError("tlsEnable needs tlsCertPath and tlsKeyPath")
    if config.tls_client_auth == "require" and not config.tls_trust_cert_path:
        raise ConfigError("tlsClientAuth = require needs tlsTrustCertPath (the client CAs)")


def load_namesrv_settings(
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> NamesrvConfig:
    values: dict[str, Any] = {}

    def apply(name: str, raw: Any, label: str) -> None:
        try:
            values[name] = _coerce(name, raw)
        except ValueError as exc:
            raise ConfigError(f"invalid setting {label}: {exc}") from None

    if config_file is not None:
        path = Path(config_file)
        table = read_settings_file(path, ConfigError)
        for key, raw in table.items():
            if key not in _BY_CAMEL:
                raise ConfigError(
                    f"unknown setting {key!r} in {path} (known: {', '.join(sorted(_BY_CAMEL))})"
                )
            apply(_BY_CAMEL[key], raw, f"{key} (in {path})")
    for key, raw in (env or {}).items():
        name = key[len(ENV_PREFIX) :].lower() if key.startswith(ENV_PREFIX) else ""
        if name in _FIELDS:
            apply(name, raw, f"{key} (environment)")
    for name, raw in (overrides or {}).items():
        apply(name, raw, f"--{name.replace('_', '-')}")
    config = NamesrvConfig(**values)
    _check_together(config)
    return config
