"""The replication handshake's authentication (sans-IO): both ends prove they hold the secret
of one replication account, and neither proof can be replayed.

Why: the HA port hands whoever completes a HELLO the whole CommitLog and the broker's metadata,
and a replica's REPORTs count towards SYNC_MASTER acknowledgements: an unauthenticated peer
could read every topic past the ACL, or make the master acknowledge puts that no replica has.

The conversation (``frames.py``)::

    master -> CHALLENGE  a fresh 16-byte nonce
    slave  -> HELLO      ... its own fresh nonce, the account's access key, and
                         proof = HMAC-SHA256(secret, "wharf-ha-hello" | challenge | HELLO)
    master -> WELCOME    ... proof = HMAC-SHA256(secret, "wharf-ha-welcome" | slave nonce |
                         challenge | WELCOME)

Each proof covers every byte of its frame before the proof (identity, offsets, epochs) and
both nonces, so a recorded handshake is worthless on another connection. The master looks the
account up by access key (the broker's ACL: an admin account, from an allowed address); a
replica configured with an account refuses a master that cannot prove the same secret (a
stranger at the master's address must not feed it a log). Without secrets on either side the
proofs are zeros and the handshake is the unauthenticated one. The frames after the handshake
carry no MAC: on an untrusted network the link needs TLS too.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

NONCE_SIZE = 16
PROOF_SIZE = 32  # SHA-256
NO_PROOF = bytes(PROOF_SIZE)

_HELLO_LABEL = b"wharf-ha-hello\0"
_WELCOME_LABEL = b"wharf-ha-welcome\0"


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


def hello_proof(secret: str, challenge: bytes, signed: bytes) -> bytes:
    """The replica's proof over the HELLO bytes before the proof (``signed``)."""
    return _mac(secret, _HELLO_LABEL + challenge + signed)


def welcome_proof(secret: str, replica_nonce: bytes, challenge: bytes, signed: bytes) -> bytes:
    """The master's proof over the WELCOME bytes before the proof (``signed``)."""
    return _mac(secret, _WELCOME_LABEL + replica_nonce + challenge + signed)


def matches(expected: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(expected, proof)


def _mac(secret: str, message: bytes) -> bytes:
    if not secret:
        return NO_PROOF
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()
