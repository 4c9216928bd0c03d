"""Kafka ACL bindings <-> Wharf's ACL accounts (``broker/kit/acl/rules.py``), where the two mean the
same; a refusal (``AclRefused``, its message for the user) where they would not. Pure: rules
in, rules out; ``admin_acls.py`` answers the requests and writes the file.

The mapping (an account's permission entry <-> bindings, principal ``User:<accessKey>``,
host ``*``):

- a topic entry ``name=PUB`` <-> ALLOW WRITE, ``SUB`` <-> ALLOW READ, ``PUB|SUB`` <-> both
  (an ALLOW ALL is stored as both), ``DENY`` <-> DENY ALL; a group entry ``SUB`` <-> ALLOW
  READ, ``DENY`` <-> DENY ALL (Wharf checks READ only on groups);
- resource ``name`` <-> LITERAL, ``prefix*`` <-> PREFIXED ``prefix``, and LITERAL ``*``
  (Kafka's wildcard) <-> the entry ``*`` when the account has one, else its
  ``defaultTopicPerm`` / ``defaultGroupPerm`` (a default of DENY is "no binding");
- DESCRIBE is implied by READ or WRITE in both: granting it is accepted (nothing stored) when
  the resource has READ or WRITE, refused otherwise.

Refused, with why: other resource types (CLUSTER: Wharf's cluster rights are an account's
``admin`` flag, Kafka's super user; TRANSACTIONAL_ID, ...), other operations (CREATE, DELETE,
ALTER, the config operations, IDEMPOTENT_WRITE: an account's rights are PUB and SUB), a DENY of
less than ALL, a host other than ``*`` (addresses are per account: whiteRemoteAddress), an
unknown or admin principal (accounts and their secrets come from ``wharf acl user create``),
and any change after which Wharf would decide differently from Kafka: Wharf takes the most
specific entry (exact name, then the longest pattern), Kafka the union of the ALLOWs minus any
DENY, so a more specific entry must hold every right of a less specific one it overlaps, and
nothing may be allowed under a DENY. Entries Kafka cannot express (``orders-??``) are left out
of DescribeAcls, and an account with one is not changed through Kafka.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from wharf.broker.kit.acl.rules import Account, AclRules, Perm

__all__ = ["AclRefused", "Binding", "Filter", "bindings", "create", "delete"]

# Kafka's enums (ResourceType, PatternType, AclOperation, AclPermissionType)
ANY = 1
TOPIC, GROUP, CLUSTER = 2, 3, 4
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8
DENY_, ALLOW = 2, 3
WILDCARD = "*"
_WILD = frozenset("*?[")
_OP_BITS = {READ: Perm.SUB, WRITE: Perm.PUB}
_KINDS = {TOPIC: "topic", GROUP: "group"}
_OPERATIONS = {0: "UNKNOWN", 1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE",
               6: "DELETE", 7: "ALTER", 8: "DESCRIBE", 9: "CLUSTER_ACTION",
               10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE"}  # fmt: skip


class AclRefused(ValueError):
    """A binding or filter Wharf's accounts cannot hold as Kafka means it (the message says
    why and what to do)."""


@dataclass(frozen=True, slots=True)
class Binding:
    resource_type: int
    name: str
    pattern: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True, slots=True)
class Filter:
    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: Binding) -> bool:
        if self.resource_type not in (ANY, b.resource_type):
            return False
        if not self._name_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        # ALL matches READ and WRITE too: Wharf stores an ALLOW ALL as both.
        if self.operation not in (ANY, b.operation) and not (
            self.operation == ALL and b.operation in _OP_BITS
        ):
            return False
        return self.permission in (ANY, b.permission)

    def _name_matches(self, b: Binding) -> bool:
        name = self.name
        if self.pattern == ANY:
            return name is None or name == b.name
        if self.pattern == MATCH:
            if name is None:
                return True
            if b.pattern == LITERAL:
                return b.name in (name, WILDCARD)
            return name.startswith(b.name)
        return self.pattern == b.pattern and (name is None or name == b.name)


# --- an account's entries as Kafka resources ----------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Entry:
    key: tuple[int, str] | None  # (LITERAL | PREFIXED, name); None: the default perm
    bits: int  # READ/WRITE as Perm bits (a group's: SUB only)
    deny: bool


def _resource(pattern: str) -> tuple[int, str] | None:
    """A Wharf pattern as (Kafka pattern type, name); None when Kafka cannot express it."""
    if pattern == WILDCARD or not any(c in _WILD for c in pattern):
        return LITERAL, pattern
    stem = pattern[:-1]
    if pattern.endswith("*") and stem and not any(c in _WILD for c in stem):
        return PREFIXED, stem
    return None


def _pattern(key: tuple[int, str]) -> str:
    return key[1] + "*" if key[0] == PREFIXED else key[1]


def _bits(kind: int, perm: Perm) -> int:
    return int(perm) & (Perm.SUB if kind == GROUP else Perm.ANY)


def _perms(account: Account, kind: int) -> tuple[tuple[str, Perm], ...]:
    return account.topic_perms if kind == TOPIC else account.group_perms


def _default(account: Account, kind: int) -> Perm:
    return account.default_topic_perm if kind == TOPIC else account.default_group_perm


def _entries(account: Account, kind: int, strict: bool = True) -> list[_Entry]:
    """The account's entries of one kind as Kafka resources, the default perm last (key None)
    unless a ``*`` entry shadows it. ``strict``: AclRefused when an entry is a pattern Kafka
    cannot express (not strict: those are skipped, for DescribeAcls)."""
    out = []
    strange = []
    for pattern, perm in _perms(account, kind):
        key = _resource(pattern)
        if key is None:
            strange.append(pattern)
            continue
        bits = _bits(kind, perm)
        out.append(_Entry(key, bits, bits == 0))
    if strange and strict:
        raise AclRefused(
            f"User:{account.access_key}'s {_KINDS[kind]} permissions use patterns Kafka cannot "
            f"express ({', '.join(strange)}): change them in plain_acl.yml"
        )
    if not any(e.key == (LITERAL, WILDCARD) for e in out):
        out.append(_Entry(None, _bits(kind, _default(account, kind)), False))
    return out


def bindings(rules: AclRules) -> list[Binding]:
    """Every account's permissions as Kafka bindings (admins have none: super users)."""
    out: list[Binding] = []
    for account in rules.accounts.values():
        if account.admin:
            continue
        principal = f"User:{account.access_key}"
        for kind in (TOPIC, GROUP):
            entries = _entries(account, kind, strict=False)
            for entry in entries:
                pattern, name = entry.key or (LITERAL, WILDCARD)
                if entry.deny:
                    out.append(Binding(kind, name, pattern, principal, "*", ALL, DENY_))
                    continue
                for op, bit in _OP_BITS.items():
                    if entry.bits & bit:
                        out.append(Binding(kind, name, pattern, principal, "*", op, ALLOW))
    return out


# --- changes ------------------------------------------------------------------------------------
def _account_of(rules: AclRules, principal: str) -> Account:
    user_type, _, name = principal.partition(":")
    if user_type != "User" or not name or name == WILDCARD:
        raise AclRefused(
            f"principal {principal!r}: Wharf's ACLs name one account, as User:<accessKey>"
        )
    account = rules.accounts.get(name)
    if account is None:
        raise AclRefused(
            f"no Wharf account {name!r}: create it first (wharf acl user create {name}); "
            "accounts hold the SASL secret, which ACLs do not"
        )
    if account.admin:
        raise AclRefused(
            f"User:{name} is a Wharf admin (Kafka's super user): ACLs do not apply to it"
        )
    return account


def _check_binding(b: Binding) -> None:
    if b.resource_type not in _KINDS:
        raise AclRefused(
            "only TOPIC and GROUP ACLs map onto Wharf's accounts; cluster rights are an "
            "account's admin flag in plain_acl.yml"
            if b.resource_type == CLUSTER
            else f"resource type {b.resource_type} has no Wharf permission"
        )
    if b.pattern not in (LITERAL, PREFIXED):
        raise AclRefused(f"pattern type {b.pattern}: a binding is LITERAL or PREFIXED")
    if not b.name or (
        any(c in _WILD for c in b.name) and (b.pattern, b.name) != (LITERAL, WILDCARD)
    ):
        raise AclRefused(f"resource name {b.name!r}: a name, a prefix or the wildcard '*'")
    if b.host != "*":
        raise AclRefused(
            f"host {b.host!r}: Wharf limits addresses per account (whiteRemoteAddress in "
            "plain_acl.yml), not per ACL; use host '*'"
        )
    op = _OPERATIONS.get(b.operation, str(b.operation))
    if b.permission == DENY_ and b.operation != ALL:
        raise AclRefused(f"DENY {op}: Wharf denies a resource whole; only DENY ALL maps")
    if b.permission not in (ALLOW, DENY_):
        raise AclRefused(f"permission type {b.permission}: ALLOW or DENY")
    allowed = (READ, ALL, DESCRIBE) if b.resource_type == GROUP else (READ, WRITE, ALL, DESCRIBE)
    if b.operation not in allowed:
        raise AclRefused(
            f"operation {op} on a {_KINDS[b.resource_type]}: Wharf's rights are "
            + ("READ (SUB)" if b.resource_type == GROUP else "READ (SUB) and WRITE (PUB)")
        )


def create(rules: AclRules, b: Binding) -> AclRules:
    """The rules with binding ``b`` added, or AclRefused."""
    _check_binding(b)
    account = _account_of(rules, b.principal)
    kind, key = b.resource_type, (b.pattern, b.name)
    entries = {e.key: e for e in _entries(account, kind)}
    current = entries.get(key) or (entries.get(None) if key == (LITERAL, WILDCARD) else None)
    where = f"User:{account.access_key} on {_KINDS[kind]} {_pattern(key)!r}"
    if b.operation == DESCRIBE:
        if current is None or current.deny or not current.bits:
            raise AclRefused(f"DESCRIBE is implied by READ or WRITE in Wharf: grant one to {where}")
        return rules
    if b.permission == DENY_:
        if current is not None and current.bits:
            raise AclRefused(f"{where} has ALLOW bindings; delete them before a DENY ALL")
        return _with(rules, account, kind, key, Perm.DENY, explicit=True)
    if current is not None and current.deny:
        raise AclRefused(f"{where} has DENY ALL, which wins over any ALLOW; delete it first")
    wanted = Perm.ANY if b.operation == ALL else _OP_BITS[b.operation]
    bits = (current.bits if current is not None else 0) | _bits(kind, wanted)
    return _with(rules, account, kind, key, Perm(bits), explicit=False)


def delete(rules: AclRules, f: Filter) -> tuple[AclRules, list[Binding]]:
    """The rules without the bindings ``f`` matches, and those bindings; AclRefused when what
    is left would not mean what Kafka would make of it."""
    matched = [b for b in bindings(rules) if f.matches(b)]
    for b in matched:
        account = rules.accounts[b.principal.partition(":")[2]]
        kind, key = b.resource_type, (b.pattern, b.name)
        entries = {e.key: e for e in _entries(account, kind)}
        entry = entries.get(key) or entries[None]
        left = 0 if b.permission == DENY_ else entry.bits & ~int(_OP_BITS[b.operation])
        rules = _with(rules, account, kind, key, Perm(left), explicit=False, drop_empty=True)
    return rules, matched


def _with(
    rules: AclRules,
    account: Account,
    kind: int,
    key: tuple[int, str],
    perm: Perm,
    *,
    explicit: bool,
    drop_empty: bool = False,
) -> AclRules:
    """``account`` with ``key``'s entry set to ``perm`` (the default perm for the wildcard when
    the account has no ``*`` entry, unless ``explicit``), checked against Kafka's meaning."""
    pattern = _pattern(key)
    perms = dict(_perms(account, kind))
    if key == (LITERAL, WILDCARD) and pattern not in perms and not explicit:
        if kind == TOPIC:
            changed = dataclasses.replace(account, default_topic_perm=perm)
        else:
            changed = dataclasses.replace(account, default_group_perm=perm)
    else:
        perms.pop(pattern, None)
        if perm or not drop_empty:
            perms[pattern] = perm
        if kind == TOPIC:
            changed = dataclasses.replace(account, topic_perms=tuple(perms.items()))
        else:
            changed = dataclasses.replace(account, group_perms=tuple(perms.items()))
    _check_union(changed, kind)
    accounts = dict(rules.accounts)
    accounts[account.access_key] = changed
    return dataclasses.replace(rules, accounts=accounts)


def _more_specific(a: _Entry, b: _Entry) -> bool:
    """Does ``a`` win over ``b`` in Wharf for some name both cover?"""
    if a.key is None or a.key == b.key:
        return False
    if b.key is None or b.key == (LITERAL, WILDCARD):
        return True
    (a_type, a_name), (b_type, b_name) = a.key, b.key
    return (
        b_type == PREFIXED and a_name.startswith(b_name) and (a_type == LITERAL or a_name != b_name)
    )


def _check_union(account: Account, kind: int) -> None:
    """AclRefused unless, for every name, Wharf's most specific entry grants what Kafka's
    union of ALLOWs minus DENYs would."""
    entries = _entries(account, kind)
    for a in entries:
        for b in entries:
            if not _more_specific(a, b) or a.deny:
                continue
            if b.deny or (b.bits & ~a.bits):
                what = "DENY ALL" if b.deny else f"{Perm(b.bits & ~a.bits).label} rights"
                raise AclRefused(
                    f"User:{account.access_key}'s {_KINDS[kind]} {_pattern(a.key or (LITERAL, '*'))!r} "
                    f"would not have the {what} of {_pattern(b.key or (LITERAL, '*'))!r}, which "
                    "Kafka applies to it too (Wharf uses the most specific entry alone)"
                )
