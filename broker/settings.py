"""Resolve the configuration once at start: embedded defaults < TOML file < environment < flags.

TOML keys are RocketMQ's camelCase setting names (``flushDiskType``); environment variables are
``WHARF_<UPPER_SNAKE_NAME>`` (``WHARF_FLUSH_DISK_TYPE``). Unknown TOML keys and invalid values
raise ConfigError naming the setting (the daemon exits with code 2). Unknown ``WHARF_*``
variables are ignored: the CLI shares the prefix (``WHARF_ENDPOINTS``).

Store settings are checked by the store's own rules (``wharf.store.config.check_setting`` for
each value, ``StoreConfig.validate`` for the bounds tying fields together): one set of bounds and
one parser per setting, so a config the broker accepts is one the store runs. This module adds
only the parsing of text, the broker's settings, and the checks the store does not need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wharf.broker.cluster.registration import parse_namesrv_addr
from wharf.broker.config import BrokerConfig, Config, StoreConfig, parse_host_port
from wharf.broker.kit.toml_file import read_settings_file
from wharf.store.config import (
    StoreConfigError,
    check_setting,
    parse_delay_levels,  # re-exported: the controller counts the levels with it
)

__all__ = ["ConfigError", "camel_name", "load_settings", "parse_delay_levels", "setting_names"]

ENV_PREFIX = "WHARF_"
# RocketMQ spells a few settings unlike the camelCase of our snake_case field names.
_CAMEL_OVERRIDES = {
    "warm_mapped_file_enable": "warmMapedFileEnable",
    "controller_heart_beat_timeout_mills": "controllerHeartBeatTimeoutMills",
    "check_crc_on_recover": "checkCRCOnRecover",
}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """An invalid or unknown setting; the message names it."""


def camel_name(field_name: str) -> str:
    if field_name in _CAMEL_OVERRIDES:
        return _CAMEL_OVERRIDES[field_name]
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _check_host_port(text: str) -> None:
    parse_host_port(text, "address")


def _check_addresses(text: str) -> None:
    """``host:port;host2:port2`` (empty: none), split as the registrar splits it."""
    for address in parse_namesrv_addr(text):
        _check_host_port(address)


def _one_of(*choices: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")

    return check


def _queue_count(value: int) -> None:
    if not 1 <= value <= 1024:
        raise ValueError(f"expected 1..1024 queues, got {value}")


def _non_empty(text: str) -> None:
    if not text.strip():
        raise ValueError("must not be empty")


# Extra checks of broker settings beyond the type (ints must also be >= 0, and > 0 unless listed
# in _ZERO_OK). Store settings are checked by the store (check_setting), plus these.
_CHECKS: dict[str, Callable[[Any], None]] = {
    # The broker resolves and advertises it; the store only encodes it (ipv4:port).
    "store_host": _check_host_port,
    "listen": _check_host_port,
    "metrics_listen": _check_host_port,
    "advertised_address": lambda v: None if v == "" else _check_host_port(v),
    "tls_listen": lambda v: None if v == "" else _check_host_port(v),
    "wire_listen": lambda v: None if v in ("", "off") else _check_host_port(v),
    "remoting_listen": lambda v: None if v == "off" else _check_host_port(v),
    "kafka_listen": lambda v: None if v == "off" else _check_host_port(v),
    "wire_tls_listen": lambda v: None if v == "" else _check_host_port(v),
    "v2_fronts_listen": lambda v: None if v == "" else _check_host_port(v),
    "remoting_tls_listen": lambda v: None if v == "" else _check_host_port(v),
    "kafka_tls_listen": lambda v: None if v == "" else _check_host_port(v),
    "kafka_advertised_address": lambda v: None if v == "" else _check_host_port(v),
    "tls_client_auth": _one_of("none", "require"),
    "log_level": _one_of(*LOG_LEVELS),
    "default_topic_queue_nums": _queue_count,
    "broker_name": _non_empty,
    "broker_cluster_name": _non_empty,
    "namesrv_addr": _check_addresses,
    "controller_addr": _check_addresses,
}
# Broker settings only: the store's own list is wharf.store.config.ZERO_ALLOWED.
_ZERO_OK = {
    "broker_id",
    "grpc_max_message_size",
    # Connection bounds: 0 = no limit (broker/kit/bounds.py).
    "connection_max_idle_ms",
    "server_channel_max_idle_time_seconds",
    "kafka_connections_max_idle_ms",
    "frame_read_timeout_ms",
    "max_connections_per_listener",
    "max_connections_per_address",
    "grpc_max_connection_age_ms",
    "kafka_group_initial_rebalance_delay_ms",
    "max_reconsume_times",
    "v2_fronts",  # 0 = no front processes
}


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


_BROKER_FIELDS = _fields(BrokerConfig)
_STORE_FIELDS = _fields(StoreConfig)
_BY_CAMEL = {camel_name(n): n for n in (*_BROKER_FIELDS, *_STORE_FIELDS)}


def _coerce(field_name: str, value: Any, from_text: bool) -> Any:
    """Check ``value`` against the field's type (parsing text from env/flags)."""
    field = _BROKER_FIELDS.get(field_name) or _STORE_FIELDS[field_name]
    kind = type(field.default)
    if from_text and isinstance(value, str):
        if kind is bool:
            lowered = value.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError(f"expected true or false, got {value!r}")
            value = lowered in ("true", "1", "yes", "on")
        elif kind is int:
            try:
                value = int(value.strip(), 0)
            except ValueError:
                raise ValueError(f"expected an integer, got {value!r}") from None
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"expected an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise ValueError(f"expected a {kind.__name__}, got {value!r}")
    if field_name in _STORE_FIELDS:
        check_setting(field_name, value)
    elif kind is int and (value < 0 or (value == 0 and field_name not in _ZERO_OK)):
        raise ValueError(f"expected a positive integer, got {value}")
    check = _CHECKS.get(field_name)
    if check is not None:
        check(value)
    return value


def _apply(values: dict[str, Any], field_name: str, raw: Any, label: str, text: bool) -> None:
    try:
        values[field_name] = _coerce(field_name, raw, text)
    except ValueError as exc:
        raise ConfigError(f"invalid setting {label}: {exc}") from None


def load_settings(
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Resolve the configuration. ``overrides`` are command-line flags keyed by snake_case
    field name, as text (``{"listen": "127.0.0.1:0"}``)."""
    values: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        table = read_settings_file(path, ConfigError)
        for key, raw in table.items():
            field_name = _BY_CAMEL.get(key)
            if field_name is None:
                raise ConfigError(f"unknown setting {key!r} in {path}{_suggest(key)}")
            _apply(values, field_name, raw, f"{key} (in {path})", text=False)
    for key, raw in (env or {}).items():
        if not key.startswith(ENV_PREFIX):
            continue
        field_name = key[len(ENV_PREFIX) :].lower()
        if field_name in _BROKER_FIELDS or field_name in _STORE_FIELDS:
            _apply(values, field_name, raw, f"{key} (environment)", text=True)
    for field_name, raw in (overrides or {}).items():
        _apply(values, field_name, raw, f"--{field_name.replace('_', '-')}", text=True)
    broker = BrokerConfig(**{k: v for k, v in values.items() if k in _BROKER_FIELDS})
    store = StoreConfig(**{k: v for k, v in values.items() if k in _STORE_FIELDS})
    _check_cross_field(store)
    _check_tls(broker)
    _check_roles(broker, store)
    return Config(broker=broker, store=store)


def _check_roles(broker: BrokerConfig, store: StoreConfig) -> None:
    if broker.enable_controller_mode:
        if not broker.controller_addr:
            raise ConfigError(
                "invalid setting controllerAddr: enableControllerMode needs the etcd client "
                "endpoints (host:port;host2:port2)"
            )
        if broker.broker_id < 1:
            raise ConfigError(
                "invalid setting brokerId: in controller mode every replica has a stable id >= 1 "
                "(it registers as 0 while it is the master)"
            )
        if store.ha_listen_port < 0:
            raise ConfigError(
                "invalid setting haListenPort: in controller mode every replica may become the "
                "master, so each needs a replication listener (0 = an ephemeral port)"
            )
        if broker.controller_heart_beat_timeout_mills < 2000:
            raise ConfigError(
                "invalid setting controllerHeartBeatTimeoutMills: at least 2000 ms (the lease "
                "is renewed every third of it, and a master stops acknowledging 1 s before it "
                "runs out)"
            )
    if bool(broker.ha_access_key) != bool(broker.ha_secret_key):
        raise ConfigError(
            "invalid setting haAccessKey: haAccessKey and haSecretKey go together (the "
            "replication account)"
        )
    if (
        not broker.enable_controller_mode
        and store.broker_role == "SLAVE"
        and not store.ha_master_address
    ):
        raise ConfigError(
            "invalid setting haMasterAddress: a SLAVE needs host:port of its master's "
            "haListenPort (or enableControllerMode)"
        )


def _check_tls(broker: BrokerConfig) -> None:
    if broker.tls_listen and not broker.tls_enable:
        raise ConfigError("invalid setting tlsListen: set tlsEnable = true to serve TLS on it")
    if broker.tls_listen == broker.listen and not broker.listen.endswith(":0"):
        raise ConfigError(
            "invalid setting tlsListen: must differ from listen (grpcio cannot serve plaintext "
            "and TLS on one port; leave tlsListen empty to make listen TLS-only)"
        )
    if broker.tls_client_auth == "require" and not broker.tls_trust_cert_path:
        raise ConfigError(
            "invalid setting tlsClientAuth: 'require' needs tlsTrustCertPath, the PEM bundle "
            "of the CAs that sign client certificates"
        )


def _check_cross_field(store: StoreConfig) -> None:
    try:
        store.validate()  # each value passed check_setting already: this is the cross-field part
    except StoreConfigError as exc:
        names = "/".join(camel_name(name) for name in exc.settings)
        raise ConfigError(f"invalid setting {names}: {exc.problem}") from None
    # Not a store bound (the store refuses such a message at append, and its tests run 16 KiB
    # segments with the 4 MiB default), but a broker configured so cannot take the messages
    # it advertises.
    if store.max_message_size >= store.mapped_file_size_commit_log:
        raise ConfigError(
            "invalid setting maxMessageSize: must be smaller than mappedFileSizeCommitLog "
            f"({store.max_message_size} >= {store.mapped_file_size_commit_log}), a record "
            "never spans segments"
        )


def _suggest(key: str) -> str:
    lowered = key.lower().replace("_", "")
    for camel in _BY_CAMEL:
        if camel.lower() == lowered:
            return f" (did you mean {camel!r}?)"
    return ""


def setting_names() -> list[str]:
    """Every accepted TOML setting name (for docs and error messages)."""
    return sorted(_BY_CAMEL)
