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

from wharf.broker.config import BrokerConfig, StoreConfig
from wharf.broker.remoting.codes import ResponseCode
from wharf.broker.remoting.frame import RemotingCommand, response_to
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
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


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


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_java_properties(text: str) -> dict[str, str]:
    """``java.util.Properties.load`` of ``text`` (what MixAll.string2Properties does): one
    ``key=value`` / ``key:value`` / ``key value`` per logical line, ``#`` and ``!`` comments,
    a trailing backslash continues the line, backslash escapes in keys and values."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd run of backslashes: continued
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out: dict[str, str] = {}
    for line in logical:
        i, n = 0, len(line)
        while i < n and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape(key)] = _unescape(rest)
    return out


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
    properties = parse_java_properties(request.body.decode("utf-8", "replace"))
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
