"""AccountChecker: the ACL's checks that need no gRPC service of the broker -- the accounts file
(``rules.py``) loaded and reloaded, a request's signature (``signature.py``) and peer address
checked, an account's permissions on a topic or group -- so the NameServer uses them as the
broker's ``AclGuard`` (``guard.py``, which adds the handler wrapping) does.

``authenticate(metadata, peer)`` (RocketMQ 5 signatures; ``authenticate_fields`` for RocketMQ 4's
remoting extFields, ``rpc_hook.py``) returns the signing ``Account`` or raises ``Unauthenticated``
(no or a bad signature, a date outside ``max_skew_s``) / ``Denied`` (a peer outside
``globalWhiteRemoteAddresses`` or the account's ``whiteRemoteAddress``); ``authorize(account,
needs, method)`` raises ``Denied`` naming the user, the action and the resource. Good signatures
are memoised per (authorization, date) for the current rules (at most 4096; the clock window
is checked on every request); ``watch()`` reloads a changed file within ``RELOAD_POLL_S`` (1 s),
keeping the rules in force when the new file does not parse. Refusals are logged at most once
a minute per key (``log_refusal``); secrets never.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wharf.broker.kit.acl import rpc_hook, signature
from wharf.broker.kit.acl.rules import (
    Account,
    AclFileError,
    AclRules,
    Perm,
    allowed_from,
    group_of_system_topic,
    parse_rules,
)
from wharf.broker.kit.acl.table import Need

log = logging.getLogger("wharf.broker.kit.acl")
RELOAD_POLL_S = 1.0
_CACHE_MAX = 4096
_LOG_INTERVAL_S = 60.0


class Unauthenticated(Exception):
    pass


class Denied(Exception):
    pass


def peer_address(peer: str) -> str:
    """'ipv4:1.2.3.4:5' -> '1.2.3.4'; 'ipv6:[::1]:5' -> '::1'; anything else -> ''."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return ""


class AccountChecker:
    def __init__(self, path: Path, max_skew_s: float) -> None:
        self.path = path
        self.max_skew_s = max_skew_s
        self.rules = AclRules()
        self._stat: tuple[int, int, int] | None = None
        # (authorization, date) -> (account, date as epoch): good signatures of these rules
        self._verified: dict[tuple[Any, Any], tuple[Account, float]] = {}
        self._perms: dict[tuple[str, str, str], int] = {}  # (user, kind, name) -> perm bits
        self._logged: dict[str, float] = {}

    # --- the file -------------------------------------------------------------------------------
    def _file_stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def load_blocking(self) -> None:
        """First load at start: raises AclFileError (the broker does not start) on a broken
        file; a missing file = no accounts (every request refused), with a WARNING."""
        self._stat = self._file_stat()
        if self._stat is None:
            log.warning(
                "aclEnable is on but %s does not exist: every request is refused until "
                "accounts are added (wharf acl user create --store ...)", self.path
            )  # fmt: skip
            self._swap(AclRules())
            return
        self._swap(parse_rules(self.path.read_text(encoding="utf-8")))
        log.info("ACL enabled: %d account(s) from %s", len(self.rules.accounts), self.path)

    def _swap(self, rules: AclRules) -> None:
        self.rules = rules
        self._verified = {}
        self._perms = {}

    def reload_if_changed_blocking(self) -> bool:
        stat = self._file_stat()
        if stat == self._stat:
            return False
        self._stat = stat
        if stat is None:
            log.error("ACL file %s was removed: keeping the previous rules", self.path)
            return False
        try:
            rules = parse_rules(self.path.read_text(encoding="utf-8"))
        except (AclFileError, OSError, UnicodeDecodeError) as exc:
            log.error("ACL file %s not reloaded, keeping the previous rules: %s", self.path, exc)
            return False
        self._swap(rules)
        log.info("ACL reloaded: %d account(s) from %s", len(rules.accounts), self.path)
        return True

    def replace_rules_blocking(self, rules: AclRules) -> None:
        """Write ``rules`` as the file (atomically: a temporary file, fsynced, renamed; owner
        only, as ``wharf acl`` writes it) and use them at once (Kafka's CreateAcls and
        DeleteAcls). The watcher then sees the file it wrote, unchanged. Comments in the file
        are not kept."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(rules.to_yaml_text())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._stat = self._file_stat()
        self._swap(rules)
        log.info("ACL file %s rewritten: %d account(s)", self.path, len(rules.accounts))

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_POLL_S)
            try:
                await asyncio.to_thread(self.reload_if_changed_blocking)
            except Exception:  # never let the watcher die: the rules in force stay
                log.exception("ACL reload failed")

    # --- checks ---------------------------------------------------------------------------------
    def authenticate(self, metadata: Any, peer: str | Callable[[], str]) -> Account:
        """The account a request is signed by; Unauthenticated / Denied (addresses).
        ``peer`` may be a function (``context.peer``): called only when an allow-list is set."""
        auth = date = None
        for key, value in metadata or ():
            if key == signature.AUTH_HEADER:
                auth = value
            elif key == signature.DATE_HEADER:
                date = value
        hit = self._verified.get((auth, date))
        if hit is not None:  # a good signature seen before under these rules: only the clock
            account, stamp = hit
            try:
                signature.check_stamp(date or "", stamp, self.max_skew_s)
            except signature.AuthError as exc:
                raise Unauthenticated(str(exc)) from None
        else:
            account = self._authenticate_slow(metadata, auth, date)
        if not self.rules.global_white_remote_addresses and not account.white_remote_address:
            return account
        if callable(peer):
            peer = peer()
        self._check_address(account, peer_address(peer), peer)
        return account

    def authenticate_fields(
        self, fields: Mapping[str, str], body: bytes, version: int, address: str
    ) -> Account:
        """RocketMQ 4 (remoting): the account whose secret signed ``fields`` and ``body``
        (``rpc_hook``); Unauthenticated / Denied (addresses, ``address`` the peer's IP). No
        memo: every request's content differs, and the HMAC costs ~2 us + the body."""
        access_key = fields.get(rpc_hook.ACCESS_KEY)
        if not access_key:
            raise Unauthenticated(
                "no credentials: the request carries no AccessKey (set the client's "
                "session credentials)"
            )
        if not fields.get(rpc_hook.SIGNATURE):
            raise Unauthenticated(f"access key {access_key!r}: the request carries no Signature")
        account = self.rules.accounts.get(access_key)
        if account is None or not rpc_hook.verify(fields, body, version, account.secret_key):
            raise Unauthenticated(
                f"access key {access_key!r} is unknown or its signature does not match"
            )
        if self.rules.global_white_remote_addresses or account.white_remote_address:
            self._check_address(account, address, address)
        return account

    def _check_address(self, account: Account, address: str, shown: str) -> None:
        """Denied when ``account`` may not connect from ``address`` (``shown`` when empty)."""
        if not allowed_from(self.rules.global_white_remote_addresses, address):
            raise Denied(
                f"user {account.access_key!r} may not connect from {address or shown!r} "
                "(globalWhiteRemoteAddresses)"
            )
        if not allowed_from(account.white_remote_address, address):
            raise Denied(
                f"user {account.access_key!r} may not connect from {address or shown!r} "
                "(its whiteRemoteAddress)"
            )

    def replication_secret(self, access_key: str, address: str) -> str:
        """The secret a replica connecting from ``address`` must prove for ``access_key``
        (the replication handshake, ``wharf.store.ha.auth``): an admin account, since a replica
        receives every topic and the broker's metadata. PermissionError says why not (an
        unknown key and a wrong secret read alike)."""
        account = self.rules.accounts.get(access_key)
        if account is None:
            raise PermissionError(
                f"not authenticated: access key {access_key!r} is unknown or haSecretKey does "
                "not match it"
            )
        if not account.admin:
            raise PermissionError(f"user {access_key!r} is not an admin: replication needs admin")
        try:
            self._check_address(account, address, address)
        except Denied as exc:
            raise PermissionError(str(exc)) from None
        return account.secret_key

    def _authenticate_slow(self, metadata: Any, auth: Any, date: Any) -> Account:
        try:
            signed = signature.parse(metadata)
            stamp = signature.check_date(signed.date, self.max_skew_s)
        except signature.AuthError as exc:
            raise Unauthenticated(str(exc)) from None
        account = self.rules.accounts.get(signed.access_key)
        if account is None or not signature.verify(signed, account.secret_key):
            raise Unauthenticated(
                f"access key {signed.access_key!r} is unknown or its signature does not match"
            )
        if len(self._verified) >= _CACHE_MAX:
            self._verified.clear()
        self._verified[(auth, date)] = (account, stamp)
        return account

    def _perm(self, account: Account, kind: str, name: str) -> int:
        """The account's permission on a resource, memoised for the current rules (pattern
        matching costs a few microseconds per request otherwise)."""
        key = (account.access_key, kind, name)
        perm = self._perms.get(key)
        if perm is None:
            owned = account.topic_perm(name) if kind == "topic" else account.group_perm(name)
            perm = owned.value
            if len(self._perms) >= _CACHE_MAX:
                self._perms.clear()
            self._perms[key] = perm
        return perm

    def authorize(self, account: Account, needs: list[Need], method: str) -> None:
        if account.admin:
            return
        for need in needs:
            if need.kind == "admin":
                raise Denied(f"user {account.access_key!r} is not an admin: {method} needs admin")
            kind, name = need.kind, need.name
            if kind == "topic" and (group := group_of_system_topic(name)) is not None:
                kind, name = "group", group
            owned = self._perm(account, kind, name)
            wanted = need.perm.value if kind == "topic" else Perm.SUB.value
            if not owned & wanted:
                action = "PUB or SUB" if wanted == Perm.ANY.value else Perm(wanted).label
                raise Denied(
                    f"user {account.access_key!r} may not {action} on {kind} {name!r} "
                    f"({method}; granted: {Perm(owned).label})"
                )

    def log_refusal(self, key: str, message: str) -> None:
        """At most one line a minute per (method, kind of refusal): a flood of forged
        requests (each with its own date or key) cannot flood the log."""
        now = time.monotonic()
        if now - self._logged.get(key, -_LOG_INTERVAL_S) >= _LOG_INTERVAL_S:
            if len(self._logged) > 1000:
                self._logged.clear()
            self._logged[key] = now
            log.warning("refused: %s", message)
