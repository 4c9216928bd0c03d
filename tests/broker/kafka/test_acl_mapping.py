"""Kafka ACL bindings <-> plain_acl.yml accounts (acl_mapping.py): what maps, what is refused
because Wharf's most-specific-entry rule would decide differently from Kafka's union of
ALLOWs minus DENYs, and deletions that would change the meaning of what is left."""

from __future__ import annotations

import pytest
from wharf.broker.frontends.kafka.acl_mapping import (
    ALL,
    ALLOW,
    ANY,
    DENY_,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AclRefused,
    Binding,
    Filter,
    bindings,
    create,
    delete,
)
from wharf.broker.kit.acl.rules import Perm, parse_rules

RULES = parse_rules("""
accounts:
  - accessKey: root
    secretKey: s
    admin: true
    topicPerms: ["x=PUB"]
  - accessKey: app
    secretKey: s
    defaultTopicPerm: SUB
    topicPerms: ["orders=PUB|SUB", "audit-*=DENY"]
    groupPerms: ["billing=SUB"]
""")


def allow(name: str, op: int, pattern: int = LITERAL, kind: int = TOPIC) -> Binding:
    return Binding(kind, name, pattern, "User:app", "*", op, ALLOW)


def test_accounts_read_as_kafka_bindings() -> None:
    got = {(b.resource_type, b.name, b.pattern, b.operation, b.permission) for b in bindings(RULES)}
    assert got == {
        (TOPIC, "orders", LITERAL, READ, ALLOW),
        (TOPIC, "orders", LITERAL, WRITE, ALLOW),
        (TOPIC, "audit-", PREFIXED, ALL, DENY_),
        (TOPIC, "*", LITERAL, READ, ALLOW),  # defaultTopicPerm: SUB, Kafka's wildcard
        (GROUP, "billing", LITERAL, READ, ALLOW),
    }  # the admin (Kafka's super user) has none


def test_a_binding_that_wharf_would_read_differently_is_refused() -> None:
    # "pay" would hold WRITE only and lose the wildcard's READ (Kafka: the union)
    rules = create(RULES, allow("pay", READ))
    rules = create(rules, allow("pay", WRITE))
    assert dict(rules.accounts["app"].topic_perms)["pay"] == Perm.ANY
    with pytest.raises(AclRefused, match="most specific entry"):
        create(rules, allow("audit-eu", WRITE))  # under a DENY ALL: Kafka denies
    with pytest.raises(AclRefused, match="DENY ALL, which wins"):
        create(rules, allow("audit-", READ, PREFIXED))
    with pytest.raises(AclRefused, match="only DENY ALL"):
        create(rules, Binding(TOPIC, "orders", LITERAL, "User:app", "*", WRITE, DENY_))


def test_the_wildcard_is_the_default_permission_and_a_deletion_keeps_the_meaning() -> None:
    wildcard_reads = Filter(TOPIC, "*", LITERAL, None, None, READ, ANY)
    # "orders" would then hold READ and WRITE while Kafka's union is the same: allowed
    rules, gone = delete(RULES, wildcard_reads)
    assert [b.name for b in gone] == ["*"]
    assert rules.accounts["app"].default_topic_perm == Perm.DENY
    # removing READ from "orders" while the wildcard grants it would change nothing in Kafka
    # but take READ away in Wharf: refused
    with pytest.raises(AclRefused, match="most specific entry"):
        delete(RULES, Filter(TOPIC, "orders", LITERAL, None, None, READ, ANY))


def test_an_account_with_patterns_kafka_cannot_express_is_shown_but_not_changed() -> None:
    rules = parse_rules("""
accounts:
  - accessKey: app
    secretKey: s
    topicPerms: ["orders=PUB", "orders-??=SUB"]
""")
    assert [(b.name, b.operation) for b in bindings(rules)] == [("orders", WRITE)]
    with pytest.raises(AclRefused, match=r"orders-\?\?"):
        create(rules, allow("audit", READ))
