"""RocketMQ 4's request signature ("ACL 1.0"), checked exactly as the 4.x clients compute it.

A 4.x client with credentials (Java ``AclClientRPCHook``, the C++ client's ``ClientRPCHook``
behind PyPI ``rocketmq``, ali-ons) adds extFields to every remoting request:

    AccessKey:     <ak>
    SecurityToken: <token>          (optional; signed like any other field, not checked)
    Signature:     base64(HMAC-SHA1(key=secretKey (UTF-8), msg=content))

``content`` is the values of every extField except ``Signature`` -- AccessKey and SecurityToken
included, and the C++ client's ``OnsChannel`` -- in the order of their keys (Java's ``TreeMap``:
UTF-16 code units), concatenated (UTF-8), then the body bytes as sent (Java's
``AclUtils.combineRequestContent``; the broker's side is ``PlainAccessResource.parse``). A
request of version <= V4_9_3 leaves ``_UNIQUE_KEY_QUERY`` out: those clients added it to QUERY_MESSAGE
after signing, and RocketMQ's broker skips it for them.

The signature covers no date or nonce: a captured request can be replayed as is (RocketMQ 4's
design). TLS on the remoting port is what keeps requests from being captured.

Sans-IO: the caller (``accounts.AccountChecker.authenticate_fields``) finds the account.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
V4_9_3 = 399  # MQVersion.Version.V4_9_3.ordinal(): the request header's ``version``
_MAX_SIGNATURE = 256  # base64 of 20 bytes is 28 characters


def _java_order(key: str) -> bytes:
    """Java's String.compareTo order (UTF-16 code units), which a TreeMap sorts by."""
    return key.encode("utf-16-be", "surrogatepass")


def _head(fields: Mapping[str, str], version: int) -> bytes:
    """The sorted extField values (Signature left out), UTF-8."""
    skip_unique = version <= V4_9_3
    keys = sorted(fields)  # code points: Java's order for every key below U+E000
    if not all(key.isascii() for key in keys):
        keys.sort(key=_java_order)  # (~15 us more for a send's fields: only when needed)
    values = "".join(
        fields[key]
        for key in keys
        if key != SIGNATURE and not (skip_unique and key == UNIQUE_MSG_QUERY_FLAG)
    )
    return values.encode("utf-8", "replace")  # a lone surrogate: '?', as Java's getBytes


def content(fields: Mapping[str, str], body: bytes, version: int) -> bytes:
    """What the client signed: the sorted extField values (Signature left out), then the body."""
    return _head(fields, version) + bytes(body)


def _mac(secret_key: str, head: bytes, body: bytes) -> str:
    mac = hmac.new(secret_key.encode("utf-8"), head, hashlib.sha1)
    if body:
        mac.update(body)  # not concatenated: a send's body is hashed where it lies
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(secret_key: str, data: bytes) -> str:
    """base64 HMAC-SHA1 of ``data`` under ``secret_key`` (``AclSigner.calSignature``)."""
    return _mac(secret_key, data, b"")


def signed_fields(
    fields: Mapping[str, str],
    body: bytes,
    access_key: str,
    secret_key: str,
    version: int = 0,
    security_token: str | None = None,
) -> dict[str, str]:
    """``fields`` with AccessKey (SecurityToken) and Signature added, as the Java client's hook
    signs a request (the test suite's raw client)."""
    out = dict(fields)
    out[ACCESS_KEY] = access_key
    if security_token is not None:
        out[SECURITY_TOKEN] = security_token
    out.pop(SIGNATURE, None)
    out[SIGNATURE] = _mac(secret_key, _head(out, version), body)
    return out


def verify(fields: Mapping[str, str], body: bytes, version: int, secret_key: str) -> bool:
    """Constant-time check of the request's Signature against the one ``secret_key`` gives."""
    sent = fields.get(SIGNATURE)
    if not sent or len(sent) > _MAX_SIGNATURE:
        return False
    expected = _mac(secret_key, _head(fields, version), body)
    return hmac.compare_digest(expected.encode("ascii"), sent.encode("utf-8", "replace"))
