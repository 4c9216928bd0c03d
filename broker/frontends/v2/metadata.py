"""Request metadata of the official clients (``x-mq-*`` headers), read in one place.

- ``x-mq-client-id`` is required on every RPC, the Telemetry stream included: without it the
  RPC answers CLIENT_ID_REQUIRED (40017), as RocketMQ's proxy does. Clients, telemetry
  streams and settings are keyed on it.
- ``authorization`` (MQv2-HMAC-SHA1, sent even with empty credentials) is accepted and
  ignored while Wharf has no ACL; ``x-mq-date-time`` is not checked (clients write local time
  with a literal 'Z'). ``x-mq-language`` is any string (Node says HTTP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wharf.broker.frontends.v2.codes import Code, V2Error

CLIENT_ID = "x-mq-client-id"
NAMESPACE = "x-mq-namespace"
LANGUAGE = "x-mq-language"
MAX_CLIENT_ID_LENGTH = 256


@dataclass(frozen=True, slots=True)
class ClientMeta:
    client_id: str
    namespace: str = ""
    language: str = ""


def client_id_of(metadata: Any) -> str:
    """The caller's ``x-mq-client-id`` (the last one sent), checked as ``client_meta`` does:
    what every RPC needs, without building the whole ``ClientMeta`` (a hot path: the official
    clients send eight headers on every call)."""
    client_id = ""
    for key, value in metadata or ():
        if key == CLIENT_ID and isinstance(value, str):
            client_id = value
    return _checked(client_id.strip())


def _checked(client_id: str) -> str:
    if not client_id:
        raise V2Error(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} header is required")
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise V2Error(
            Code.CLIENT_ID_REQUIRED,
            f"{CLIENT_ID} is {len(client_id)} characters; the limit is {MAX_CLIENT_ID_LENGTH}",
        )
    return client_id


def client_meta(metadata: Any) -> ClientMeta:
    """The caller's headers (``context.invocation_metadata()``: (key, value) pairs);
    V2Error(CLIENT_ID_REQUIRED) when the client id is missing, blank or absurdly long."""
    values: dict[str, str] = {}
    for key, value in metadata or ():
        if key in (CLIENT_ID, NAMESPACE, LANGUAGE) and isinstance(value, str):
            values[key] = value
    client_id = _checked(values.get(CLIENT_ID, "").strip())
    return ClientMeta(client_id, values.get(NAMESPACE, ""), values.get(LANGUAGE, ""))
