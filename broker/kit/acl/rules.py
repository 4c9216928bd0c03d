"""The ACL file: users, their secrets and permissions, in RocketMQ 4's ``plain_acl.yml`` shape.

File: ``<storePathRootDir>/config/plain_acl.yml`` (YAML, read with PyYAML's safe loader)::

    globalWhiteRemoteAddresses: ["10.0.0.0/8", "192.168.0.*"]   # optional; empty = any
    accounts:
      - accessKey: orders-app
        secretKey: s3cret                  # a number is read as its text
        admin: false                       # true: every RPC, every resource, AdminService
        defaultTopicPerm: DENY             # topics not listed below (default DENY)
        defaultGroupPerm: DENY             # groups not listed below (default DENY)
        topicPerms: ["orders=PUB|SUB", "orders-*=SUB", "audit=DENY"]
        groupPerms: ["billing=SUB"]
        whiteRemoteAddress: "127.0.0.1"    # optional; a string or a list; empty = any

Why this shape and not ACL 2.0's users + policies: ACL 2.0 keeps users and policies in the
broker's metadata store, managed only through admin commands; the one file format RocketMQ
operators know (and can review, diff and ship with configuration management) is 4.x's
``plain_acl.yml``. Its account = user + one policy, which covers what Wharf checks.

Semantics (Wharf's, stated where they differ from RocketMQ 4):

- Permissions: ``DENY`` (0), ``PUB`` (1), ``SUB`` (2), ``PUB|SUB`` / ``SUB|PUB`` / ``ANY`` (3).
  A topic needs PUB to be sent to, SUB to be read; a group needs SUB to consume or commit
  offsets with it. ``%RETRY%<g>`` and ``%DLQ%<g>`` topics are checked as group ``<g>``.
- Resource patterns: an exact name wins; otherwise the LONGEST matching pattern of
  ``fnmatch`` syntax (``*``, ``orders-*``, ``orders-??``) wins; otherwise the default perm.
- ``admin: true`` grants everything (as RocketMQ 4's PlainPermissionChecker skips admins).
- Addresses are ALLOW-lists: a request must come from an address matching
  ``globalWhiteRemoteAddresses`` (if set) AND the account's ``whiteRemoteAddress`` (if set).
  RocketMQ 4 uses the same keys as BYPASS lists (no signature needed from those hosts); Wharf
  never skips the signature, so a RocketMQ 4 file only becomes stricter, never looser.
  Patterns: ``*``, an IP, a CIDR (``10.0.0.0/8``) or a wildcard (``192.168.0.*``).
- Access keys are unique; an unknown key, a duplicate key, an unknown field or a bad perm is a
  load error naming the account (never its secret) and the field.
"""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
from dataclasses import dataclass, field
from typing import Any

import yaml

FILE_NAME = "plain_acl.yml"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
_WILDCARDS = frozenset("*?[")


class AclFileError(ValueError):
    """The ACL file cannot be used; the message names the account and field."""


class Perm(enum.IntFlag):
    DENY = 0
    PUB = 1
    SUB = 2
    ANY = 3

    @property
    def label(self) -> str:
        return {0: "DENY", 1: "PUB", 2: "SUB", 3: "PUB|SUB"}[int(self)]


_PERM_NAMES = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.ANY,
    "SUB|PUB": Perm.ANY,
    "ANY": Perm.ANY,
}


def parse_perm(text: str) -> Perm:
    perm = _PERM_NAMES.get(text.strip().upper().replace(" ", ""))
    if perm is None:
        raise ValueError(f"unknown permission {text!r} (DENY, PUB, SUB, PUB|SUB)")
    return perm


def _resource_perms(entries: list[str], what: str) -> tuple[tuple[str, Perm], ...]:
    out: dict[str, Perm] = {}
    for entry in entries:
        if not isinstance(entry, str) or "=" not in entry:
            raise ValueError(f"{what} entry {entry!r} is not NAME=PERM")
        name, _, perm = entry.rpartition("=")
        if not name.strip():
            raise ValueError(f"{what} entry {entry!r} has no name")
        out[name.strip()] = parse_perm(perm)
    return tuple(out.items())


def format_resource_perms(perms: tuple[tuple[str, Perm], ...]) -> list[str]:
    return [f"{name}={perm.label}" for name, perm in perms]


def _check_address_pattern(pattern: str) -> str:
    pattern = pattern.strip()
    if pattern == "*" or not pattern:
        return pattern
    if "/" in pattern:
        ipaddress.ip_network(pattern, strict=False)  # ValueError names the problem
    elif any(c in _WILDCARDS for c in pattern):
        if not set(pattern) <= set("0123456789abcdefABCDEF.:*?[]-"):
            raise ValueError(f"unsupported address pattern {pattern!r}")
    else:
        ipaddress.ip_address(pattern)
    return pattern


def address_matches(pattern: str, address: str) -> bool:
    if pattern == "*":
        return True
    if "/" in pattern:
        try:
            return ipaddress.ip_address(address) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    return fnmatch.fnmatchcase(address, pattern)


def _address_list(raw: Any, what: str) -> tuple[str, ...]:
    if raw is None or raw == "":
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list):
        raise ValueError(f"{what} must be an address pattern or a list of them")
    out = []
    for item in items:
        for part in str(item).split(","):  # RocketMQ 4 allows "a,b" in one string
            if part.strip():
                out.append(_check_address_pattern(part))
    return tuple(out)


def allowed_from(patterns: tuple[str, ...], address: str) -> bool:
    return not patterns or any(address_matches(p, address) for p in patterns)


def _best(perms: tuple[tuple[str, Perm], ...], name: str, default: Perm) -> Perm:
    best: tuple[int, Perm] | None = None
    for pattern, perm in perms:
        if pattern == name:
            return perm
        wild = any(c in _WILDCARDS for c in pattern)
        if wild and fnmatch.fnmatchcase(name, pattern) and (best is None or len(pattern) > best[0]):
            best = (len(pattern), perm)
    return default if best is None else best[1]


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)  # never in a repr, a log line or a reply
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: tuple[tuple[str, Perm], ...] = ()
    group_perms: tuple[tuple[str, Perm], ...] = ()
    white_remote_address: tuple[str, ...] = ()

    def topic_perm(self, topic: str) -> Perm:
        return _best(self.topic_perms, topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        return _best(self.group_perms, group, self.default_group_perm)

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "accessKey": self.access_key,
            "secretKey": self.secret_key,
            "admin": self.admin,
            "defaultTopicPerm": self.default_topic_perm.label,
            "defaultGroupPerm": self.default_group_perm.label,
            "topicPerms": format_resource_perms(self.topic_perms),
            "groupPerms": format_resource_perms(self.group_perms),
        }
        if self.white_remote_address:
            out["whiteRemoteAddress"] = list(self.white_remote_address)
        return out


_ACCOUNT_KEYS = {
    "accessKey",
    "secretKey",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
    "whiteRemoteAddress",
}
_TOP_KEYS = {"accounts", "globalWhiteRemoteAddresses", "dataVersion"}


def _account(raw: Any, index: int) -> Account:
    if not isinstance(raw, dict):
        raise AclFileError(f"accounts[{index}] is not a mapping")
    key = raw.get("accessKey")
    label = f"account {key!r}" if isinstance(key, str) and key else f"accounts[{index}]"
    unknown = set(raw) - _ACCOUNT_KEYS
    if unknown:
        raise AclFileError(f"{label}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    if not isinstance(key, str) or not key.strip() or any(c in key for c in " ,="):
        raise AclFileError(f"{label}: accessKey must be a non-empty word (no space, ',' or '=')")
    secret = raw.get("secretKey")
    if isinstance(secret, int) and not isinstance(secret, bool):
        secret = str(secret)
    if not isinstance(secret, str) or not secret:
        raise AclFileError(f"{label}: secretKey must be a non-empty string")
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError(f"{label}: admin must be true or false")
    try:
        return Account(
            access_key=key,
            secret_key=secret,
            admin=admin,
            default_topic_perm=parse_perm(str(raw.get("defaultTopicPerm") or "DENY")),
            default_group_perm=parse_perm(str(raw.get("defaultGroupPerm") or "DENY")),
            topic_perms=_resource_perms(raw.get("topicPerms") or [], "topicPerms"),
            group_perms=_resource_perms(raw.get("groupPerms") or [], "groupPerms"),
            white_remote_address=_address_list(raw.get("whiteRemoteAddress"), "whiteRemoteAddress"),
        )
    except (ValueError, TypeError) as exc:
        raise AclFileError(f"{label}: {exc}") from None


@dataclass(frozen=True, slots=True)
class AclRules:
    accounts: dict[str, Account] = field(default_factory=dict)
    global_white_remote_addresses: tuple[str, ...] = ()

    def to_yaml_text(self) -> str:
        doc: dict[str, Any] = {}
        if self.global_white_remote_addresses:
            doc["globalWhiteRemoteAddresses"] = list(self.global_white_remote_addresses)
        doc["accounts"] = [a.to_yaml() for a in self.accounts.values()]
        header = "# Wharf ACL (RocketMQ 4 plain_acl.yml shape); see broker/README.md\n"
        return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def parse_rules(text: str) -> AclRules:
    """The rules of a file's text; AclFileError when anything in it is invalid (the caller
    then keeps its previous rules)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclFileError(f"not valid YAML: {exc}") from None
    if doc is None:
        return AclRules()
    if not isinstance(doc, dict):
        raise AclFileError("the top level must be a mapping with 'accounts'")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise AclFileError(f"unknown top-level field(s) {', '.join(sorted(map(str, unknown)))}")
    raw_accounts = doc.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise AclFileError("accounts must be a list")
    accounts: dict[str, Account] = {}
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, index)
        if account.access_key in accounts:
            raise AclFileError(f"account {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    try:
        white = _address_list(doc.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
    except ValueError as exc:
        raise AclFileError(f"globalWhiteRemoteAddresses: {exc}") from None
    return AclRules(accounts, white)


def group_of_system_topic(topic: str) -> str | None:
    """``%RETRY%g`` / ``%DLQ%g`` -> ``g`` (checked as the group), else None."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix) :]
    return None
