"""SaslHandshake (v1) and SaslAuthenticate (v0-1): a connection proves one of the ACL's
accounts (access key = SASL user name, secret key = password) before anything else when
aclEnable is on (server.py closes a connection that asks anything else first).

- PLAIN (RFC 4616): ``authzid NUL user NUL password``, the secret compared in constant time.
  It sends the secret itself: use the TLS listener where the network is not trusted.
- SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / 7677), two rounds: the secret never crosses the wire. The
  account file holds plaintext secrets, so the salted password is derived here: the salt is
  fixed per user (SHA-256 of the user name: a salt is public anyway, and a per-login random
  one would cost a PBKDF2 per login), 4096 iterations (Kafka's minimum), computed in a thread
  once per (user, secret, hash) and cached.
- The account's address allow-lists (whiteRemoteAddress, globalWhiteRemoteAddresses) apply.
- A failure answers SASL_AUTHENTICATION_FAILED with the same message for an unknown user and
  a wrong secret; the connection stays unauthenticated.
- aclEnable off: SaslHandshake offers PLAIN and any user and password are accepted (a client
  configured for SASL still connects); SCRAM needs the accounts' secrets, so it is not offered.
- SaslHandshake v0 (pre-1.0 clients): the tokens that follow travel as bare size-prefixed
  frames, not SaslAuthenticate requests (``raw_token``); a failure closes the connection,
  as Kafka does then.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Account, allowed_from

__all__ = ["SaslHandlers"]

PLAIN = "PLAIN"
SCRAM = "SCRAM-SHA-256"
SCRAM_512 = "SCRAM-SHA-512"
SCRAM_HASHES = {SCRAM: "sha256", SCRAM_512: "sha512"}  # mechanism -> hashlib name
ITERATIONS = 4096
_FAILED = "authentication failed: unknown user or wrong secret"


@dataclass(slots=True)
class _Scram:
    account: Account | None  # None: an unknown user, who fails at the proof
    client_first_bare: str
    server_first: str
    nonce: str  # the client's nonce and the server's fresh part
    salted: bytes
    client_nonce: str
    hash_name: str  # "sha256" | "sha512"

    @property
    def final_nonces(self) -> tuple[str, str]:
        """The nonces a client-final-message may carry: the server's (RFC 5802), or the client
        nonce once more before it, as librdkafka < 2.6.1 sends (Debian's kcat, librdkafka
        2.0.2; librdkafka PR 4895; Kafka 3.8.1-3.9 accepted it too). Both end with the
        server's fresh part, so a replayed exchange still fails."""
        return self.nonce, self.client_nonce + self.nonce


class SaslHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env
        self._salted: dict[tuple[str, str, str], bytes] = {}

    def mechanisms(self) -> list[str]:
        return [PLAIN, SCRAM, SCRAM_512] if self.env.acl is not None else [PLAIN]

    async def handshake(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        mechanisms = self.mechanisms()
        mechanism = body["mechanism"]
        if mechanism not in mechanisms or conn.authenticated:
            code = (
                Code.ILLEGAL_SASL_STATE if conn.authenticated else Code.UNSUPPORTED_SASL_MECHANISM
            )
            return {"error_code": code, "mechanisms": mechanisms}
        conn.sasl_mechanism = mechanism
        conn.sasl_state = None
        conn.sasl_raw = version == 0
        return {"error_code": 0, "mechanisms": mechanisms}

    async def raw_token(self, conn: KafkaConnection, token: bytes) -> bytes | None:
        """A bare SASL token after SaslHandshake v0: the answer's bytes, None on failure."""
        reply = await self.authenticate(conn, 0, {"auth_bytes": token})
        if reply["error_code"] != Code.NONE:
            return None
        if conn.authenticated:
            conn.sasl_raw = False
        return bytes(reply["auth_bytes"])

    async def authenticate(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        token: bytes = body["auth_bytes"]
        if conn.authenticated or not conn.sasl_mechanism:
            return _reply(Code.ILLEGAL_SASL_STATE, "SaslHandshake first, once per connection")
        if conn.sasl_mechanism == PLAIN:
            return self._plain(conn, token)
        return await self._scram(conn, token)

    def _account(self, conn: KafkaConnection, user: str) -> Account | None:
        acl = self.env.acl
        assert acl is not None
        account = acl.rules.accounts.get(user)
        if account is None:
            return None
        if not allowed_from(acl.rules.global_white_remote_addresses, conn.peer_host):
            return None
        if not allowed_from(account.white_remote_address, conn.peer_host):
            return None
        return account

    def _plain(self, conn: KafkaConnection, token: bytes) -> dict[str, Any]:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            return _reply(Code.SASL_AUTHENTICATION_FAILED, "PLAIN: authzid NUL user NUL password")
        user, password = parts[1].decode(errors="replace"), parts[2]
        if self.env.acl is None:
            conn.authenticated = True
            return _reply(Code.NONE)
        account = self._account(conn, user)
        if account is None or not hmac.compare_digest(account.secret_key.encode(), password):
            return _reply(Code.SASL_AUTHENTICATION_FAILED, _FAILED)
        conn.account, conn.authenticated = account, True
        return _reply(Code.NONE)

    async def _scram(self, conn: KafkaConnection, token: bytes) -> dict[str, Any]:
        state = conn.sasl_state
        try:
            text = token.decode()
        except UnicodeDecodeError:
            return _reply(Code.SASL_AUTHENTICATION_FAILED, "SCRAM: not UTF-8")
        if state is None:
            return await self._scram_first(conn, text)
        conn.sasl_state = None
        assert isinstance(state, _Scram)
        fields = dict(f.split("=", 1) for f in text.split(",") if "=" in f)
        without_proof = text.rsplit(",p=", 1)[0]
        if fields.get("r") not in state.final_nonces or "p" not in fields:
            return _reply(Code.SASL_AUTHENTICATION_FAILED, _FAILED)
        auth_message = f"{state.client_first_bare},{state.server_first},{without_proof}".encode()
        digest = state.hash_name
        client_key = _hmac(state.salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        signature = _hmac(stored_key, auth_message, digest)
        try:
            proof = base64.b64decode(fields["p"])
        except ValueError:
            return _reply(Code.SASL_AUTHENTICATION_FAILED, _FAILED)
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if (
            state.account is None
            or len(proof) != len(signature)
            or not hmac.compare_digest(hashlib.new(digest, recovered).digest(), stored_key)
        ):
            return _reply(Code.SASL_AUTHENTICATION_FAILED, _FAILED)
        server_key = _hmac(state.salted, b"Server Key", digest)
        server_signature = _hmac(server_key, auth_message, digest)
        conn.account, conn.authenticated = state.account, True
        return _reply(Code.NONE, None, b"v=" + base64.b64encode(server_signature))

    async def _scram_first(self, conn: KafkaConnection, text: str) -> dict[str, Any]:
        # client-first: gs2 header ("n,," or "n,a=authzid,") then "n=user,r=nonce"
        header_end = text.find(",", text.find(",") + 1)
        bare = text[header_end + 1 :] if header_end > 0 else ""
        fields = dict(f.split("=", 1) for f in bare.split(",") if "=" in f)
        user = fields.get("n", "").replace("=2C", ",").replace("=3D", "=")
        client_nonce = fields.get("r", "")
        if not user or not client_nonce:
            return _reply(Code.SASL_AUTHENTICATION_FAILED, "SCRAM: no user name or nonce")
        account = self._account(conn, user)
        digest = SCRAM_HASHES[conn.sasl_mechanism]
        salt = hashlib.sha256(f"wharf-kafka-scram:{user}".encode()).digest()[:16]
        if account is None:
            # An unknown user gets a challenge too and fails at the proof, as a wrong secret
            # does: the exchange does not tell which user names exist.
            salted = os.urandom(hashlib.new(digest).digest_size)
        else:
            key = (user, account.secret_key, digest)
            salted = self._salted.get(key) or b""
            if not salted:
                salted = await asyncio.to_thread(
                    hashlib.pbkdf2_hmac, digest, account.secret_key.encode(), salt, ITERATIONS
                )
                if len(self._salted) > 1024:
                    self._salted.clear()
                self._salted[key] = salted
        nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={ITERATIONS}"
        conn.sasl_state = _Scram(account, bare, server_first, nonce, salted, client_nonce, digest)
        return _reply(Code.NONE, None, server_first.encode())


def _hmac(key: bytes, data: bytes, digest: str) -> bytes:
    return hmac.new(key, data, digest).digest()


def _reply(code: Code, message: str | None = None, data: bytes = b"") -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "auth_bytes": data,
        "session_lifetime_ms": 0,
    }
