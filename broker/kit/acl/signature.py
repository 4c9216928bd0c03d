"""RocketMQ 5's request signature, checked exactly as the official clients compute it.

Every request carries two metadata entries (rocketmq-clients ``Signature.metadata``; the
Python 5.1.2 client, the Java and Node clients, and Wharf's own SDK/CLI/Spark connector):

    x-mq-date-time: 20261122T193000Z
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>

with ``<hex> = hex(HMAC-SHA1(key=secretKey (UTF-8), msg=x-mq-date-time (UTF-8)))``; the case
of the hex digits does not matter (Java's proxy hex-decodes it).

Clock skew: the official clients format LOCAL time with a literal ``Z`` (Python's
``datetime.now()``, Java's ``DateFormat`` in the default zone), so a date is accepted when it is
within ``max_skew_s`` (aclMaxClockSkew, 15 min by default) of the broker's UTC clock OR of its
local clock (same zone as the client: the common deployment). Anything else is refused, so a
captured header stops working after the skew window; within the window it can be replayed
(the scheme signs only the date: TLS is what keeps headers from being captured).

``authenticate`` returns the access key (the caller then checks the secret) or raises
``AuthError`` whose message never says which part of the signature was wrong.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import hmac
import time
from dataclasses import dataclass

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
AUTH_HEADER = "authorization"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
_MAX_HEADER = 1024  # longer authorization values are refused before parsing


class AuthError(Exception):
    """A request that is not authenticated; ``str()`` is safe to send to the client."""


@dataclass(frozen=True, slots=True)
class SignedRequest:
    access_key: str
    date: str
    signature: str  # lowercase hex as sent


def sign(secret_key: str, date_time: str) -> str:
    """Lowercase hex HMAC-SHA1 of ``date_time`` under ``secret_key`` (the clients' formula)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse(metadata: tuple[tuple[str, str | bytes], ...] | None) -> SignedRequest:
    """The signed parts of a request's metadata; AuthError when absent or malformed."""
    auth = date = None
    for key, value in metadata or ():
        if key == AUTH_HEADER and isinstance(value, str):
            auth = value
        elif key == DATE_HEADER and isinstance(value, str):
            date = value
    if not auth:
        raise AuthError("no credentials: the request carries no 'authorization' metadata")
    if len(auth) > _MAX_HEADER:
        raise AuthError("malformed 'authorization' metadata (too long)")
    algorithm, _, rest = auth.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError(f"unsupported authorization scheme: expected {ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields[name.strip()] = value.strip()
    access_key = fields.get("Credential", "")
    signature = fields.get("Signature", "")
    signed = [h.strip().lower() for h in fields.get("SignedHeaders", "").split(";")]
    if not access_key:
        raise AuthError("no credentials: the request has an empty access key (anonymous)")
    if not signature or DATE_HEADER not in signed:
        raise AuthError(
            f"malformed 'authorization' metadata: expected Credential=, SignedHeaders="
            f"{DATE_HEADER}, Signature="
        )
    if not date:
        raise AuthError(f"no '{DATE_HEADER}' metadata: the signature needs it")
    return SignedRequest(access_key, date, signature.lower())


def check_date(date: str, max_skew_s: float, now: float | None = None) -> float:
    """Refuse a date that does not parse or is outside the skew window (see module doc);
    returns it as seconds since the epoch (read as UTC)."""
    stamp = _epoch(date)
    if stamp is None:
        raise AuthError(f"malformed '{DATE_HEADER}': expected YYYYMMDDTHHMMSSZ")
    check_stamp(date, stamp, max_skew_s, now)
    return stamp


def check_stamp(date: str, stamp: float, max_skew_s: float, now: float | None = None) -> None:
    now = time.time() if now is None else now
    if abs(stamp - now) <= max_skew_s:
        return
    if abs(stamp - (now + time.localtime(now).tm_gmtoff)) <= max_skew_s:
        return  # the official clients' local time with a 'Z'
    raise AuthError(
        f"request date {date} is more than {max_skew_s:g} s away from the broker's clock "
        "(clock skew or a replayed request)"
    )


@functools.lru_cache(maxsize=4096)
def _epoch(date: str) -> float | None:
    """Seconds since the epoch of a date read as UTC; memoised (strptime costs ~8 us and the
    clients send one date per second)."""
    try:
        return float(calendar.timegm(time.strptime(date, DATE_FORMAT)))
    except ValueError:
        return None


def verify(request: SignedRequest, secret_key: str) -> bool:
    """Constant-time comparison of the sent signature with the expected one."""
    return hmac.compare_digest(sign(secret_key, request.date), request.signature)
