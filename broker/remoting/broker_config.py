"""26 GET_BROKER_CONFIG (mqadmin getBrokerConfig, the Dashboard's broker config view): the
broker's settings as RocketMQ's Configuration.getAllConfigsFormatString writes them, one
``name=value`` line each (``MixAll.string2Properties`` on the Java side), by their setting
names (TOML / RocketMQ camelCase). Secrets (the fields kept out of repr: access keys' secrets)
are left out, as they would otherwise go to any admin tool in clear. Header ``version``: the
data version JSON (GetBrokerConfigResponseHeader), which the 4.9 client does not read.
UPDATE_BROKER_CONFIG (25) stays unserved: Wharf's settings are fixed at start."""

from __future__ import annotations

import dataclasses
import json

from wharf.broker.config import BrokerConfig
from wharf.broker.remoting.codes import ResponseCode
from wharf.broker.remoting.frame import RemotingCommand, response_to
from wharf.broker.settings import camel_name

__all__ = ["broker_config_response", "broker_config_text"]


def broker_config_text(config: BrokerConfig) -> str:
    """``name=value`` lines, sorted; booleans as Java writes them."""
    lines = []
    for field in dataclasses.fields(config):
        if not field.repr:  # a secret
            continue
        value = getattr(config, field.name)
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        lines.append(f"{camel_name(field.name)}={text}")
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
