"""26 GET_BROKER_CONFIG (mqadmin getBrokerConfig, the Dashboard's broker config view): the
broker's settings as RocketMQ's Configuration.getAllConfigsFormatString writes them, one
``name=value`` line each (``MixAll.string2Properties`` on the Java side), by their setting
names (TOML / RocketMQ camelCase). Secrets (the fields kept out of repr: access keys' secrets)
are left out, as they would otherwise go to any admin tool in clear. Header ``version``: the
data version JSON (GetBrokerConfigResponseHeader), which the 4.9 client does not read.

25 UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig, the Dashboard's broker config edit): the
body is ``MixAll.properties2String`` of the keys to change. Apache's broker applies them to its
runtime objects and persists them to its broker.conf. Wharf changes none at run time, on
purpose: its settings are one frozen ``Config`` resolved once at start from four layers
(defaults < TOML < ``WHARF_*`` environment < flags, ``settings.py``) and copied by value into
the parts that use them (the read core, the store, the transaction checker...), so a change
here would reach some parts and not others, and could not be written back (the file is only
one of the layers: an environment value would win over it again at the next start). So:

- a key whose value equals the current one changes nothing: SUCCESS (re-applying a page of
  the Dashboard, or mqadmin with the value already set, works);
- ``brokerConfigPath``, ``rocketmqHome``, ``configBlackList``: 16 NO_PERMISSION "Can not
  update config in black list.", Apache's own answer;
- any other key: 16 NO_PERMISSION (Apache's code for a key it refuses), the remark naming each
  refused key and why: a Wharf setting read once at start (with its TOML name and environment
  variable, to change it and restart), a secret (never compared, so the answer tells nothing of
  its value), or not a Wharf broker setting at all (Apache ignores such keys silently: a typo
  would look applied). Nothing is applied when one key is refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from jproperties import Properties
from wharf.broker.config import BrokerConfig, StoreConfig
from wharf.broker.kit.remoting.codes import ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.broker.settings import ENV_PREFIX, camel_name

__all__ = [
    "broker_config_response",
    "broker_config_text",
    "parse_java_properties",
    "update_broker_config_response",
]

log = logging.getLogger("broker.remoting")

# AdminBrokerProcessor.initConfigBlackList (4.9.8) + BrokerConfig.configBlackList's default.
CONFIG_BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})


def _setting_text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def broker_config_text(config: BrokerConfig) -> str:
    """``name=value`` lines, sorted; booleans as Java writes them."""
    lines = []
    for field in dataclasses.fields(config):
        if not field.repr:  # a secret
            continue
        value = getattr(config, field.name)
        lines.append(f"{camel_name(field.name)}={_setting_text(value)}")
    return "".join(f"{line}\n" for line in sorted(lines))


def broker_config_response(
    request: RemotingCommand, config: BrokerConfig, started_ms: int
) -> RemotingCommand:
    version = json.dumps(
        {"counter": 0, "stateVersion": 0, "timestamp": started_ms}, separators=(",", ":")
    )
    return response_to(
        request,
        ResponseCode.SUCCESS,
        ext_fields={"version": version},
        body=broker_config_text(config).encode(),
    )


def parse_java_properties(text: str) -> dict[str, str]:
    """``java.util.Properties.load`` of ``text`` (what MixAll.string2Properties does), by
    jproperties: ``key=value`` / ``key:value`` / ``key value`` lines, comments, continued
    lines, backslash escapes. ValueError when it does not parse."""
    table = Properties()
    try:
        table.load(text, "utf-8")
    except Exception as exc:  # jproperties' ParseError and whatever odd input raises
        raise ValueError(f"the body is not a Java properties text: {exc}") from None
    return {str(key): str(value) for key, value in table.properties.items()}


def _same_value(current: Any, text: str) -> bool:
    """Whether ``text`` (a properties value) is the setting's current value."""
    text = text.strip()
    if isinstance(current, bool):
        return text.lower() == _setting_text(current)
    if isinstance(current, int):
        try:
            return int(text) == current
        except ValueError:
            return False
    return text == str(current)


def _settings(
    broker: BrokerConfig, store: StoreConfig
) -> dict[str, tuple[dataclasses.Field[Any], Any]]:
    """camelCase setting name -> (its field, its current value), broker and store."""
    found: dict[str, tuple[dataclasses.Field[Any], Any]] = {}
    for config in (store, broker):
        for field in dataclasses.fields(config):
            found[camel_name(field.name)] = (field, getattr(config, field.name))
    return found


def update_broker_config_response(
    request: RemotingCommand, broker: BrokerConfig, store: StoreConfig, peer: str
) -> RemotingCommand:
    """25 UPDATE_BROKER_CONFIG: see the module's docstring for what is accepted and why."""
    try:
        properties = parse_java_properties(request.body.decode("utf-8", "replace"))
    except ValueError as exc:  # Apache: string2Properties gave null
        return response_to(
            request, ResponseCode.SYSTEM_ERROR, remark=f"string2Properties error: {exc}"
        )
    if any(key in CONFIG_BLACK_LIST for key in properties):
        return response_to(
            request, ResponseCode.NO_PERMISSION, remark="Can not update config in black list."
        )
    settings = _settings(broker, store)
    refused = []
    for key, value in sorted(properties.items()):
        found = settings.get(key)
        if found is None:
            refused.append(f"{key}: not a setting of a Wharf broker")
            continue
        field, current = found
        if not field.repr:
            refused.append(f"{key}: a secret, never changed or compared over remoting")
        elif not _same_value(current, value):
            refused.append(
                f"{key}: read once at start (now {_setting_text(current)}); set {key} in "
                f"the broker's TOML file or {ENV_PREFIX}{field.name.upper()} and restart it"
            )
    if refused:
        log.info("remoting: UPDATE_BROKER_CONFIG from %s refused: %s", peer, "; ".join(refused))
        return response_to(
            request,
            ResponseCode.NO_PERMISSION,
            remark="Can not update config at run time (Wharf applies settings at start only; "
            "nothing was changed): " + "; ".join(refused),
        )
    return response_to(request, ResponseCode.SUCCESS)
