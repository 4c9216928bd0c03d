"""``Refusals``: how a protocol front end answers a call the ACL refuses (its own codes, in its
own reply). Apart from ``guard.py`` (which re-exports it) so that front ends with no gRPC
service and the NameServer (which may not import the broker's handlers) name theirs too:
wharf.v1 ``guard.V1_REFUSALS``, apache.rocketmq.v2 ``broker.v2.codes.V2_REFUSALS``, RocketMQ 4
remoting ``broker.remoting.acl.REMOTING_REFUSALS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Refusals"]


@dataclass(frozen=True, slots=True)
class Refusals:
    """How a protocol front end answers a call the ACL refuses: the names (metrics, logs) and
    codes of its two refusals, the prefix of its methods in the metrics, and ``reply``
    (response class, code, message) -> response when the protocol answers in the method's
    response (apache.rocketmq.v2's Status) instead of ending the call with a gRPC status."""

    unauthenticated: tuple[str, Any]
    denied: tuple[str, Any]
    metric_prefix: str = ""
    reply: Callable[[Any, Any, str], Any] | None = None
