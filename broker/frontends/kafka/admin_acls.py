"""DescribeAcls, CreateAcls and DeleteAcls over Wharf's ACL accounts (``plain_acl.yml``): the
mapping and its refusals are ``acl_mapping.py``'s. Admin accounts only (Kafka's ALTER /
DESCRIBE on the cluster): others get CLUSTER_AUTHORIZATION_FAILED.

- aclEnable off: SECURITY_DISABLED (54), as Kafka answers without an authorizer.
- CreateAcls: each creation on its own (a refused one is INVALID_REQUEST with why, the others
  stand); the file is rewritten once per request and the new rules apply at once
  (``AccountChecker.replace_rules_blocking``, in a thread); one request at a time.
- DeleteAcls: each filter removes the bindings it matches, or none when what would be left
  means something else in Wharf than in Kafka (INVALID_REQUEST for that filter).
"""

from __future__ import annotations

import asyncio
from typing import Any

from wharf.broker.frontends.kafka import acl_mapping
from wharf.broker.frontends.kafka.acl_mapping import AclRefused, Binding, Filter
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import AclRules, Perm

__all__ = ["AclHandlers"]

_DISABLED = "No Authorizer is configured on the broker: Wharf's ACL is off (aclEnable = false)"


class AclHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env
        self._lock = asyncio.Lock()  # read-modify-write of the file, one request at a time

    def _rules(self, conn: KafkaConnection) -> AclRules:
        acl = self.env.acl
        if acl is None:
            raise KafkaError(Code.SECURITY_DISABLED, _DISABLED)
        if not self.env.allowed(conn, "admin", "", Perm.ANY):
            raise KafkaError(Code.CLUSTER_AUTHORIZATION_FAILED, "ACL requests need an admin")
        return acl.rules

    async def _save(self, rules: AclRules) -> None:
        acl = self.env.acl
        assert acl is not None
        await asyncio.to_thread(acl.replace_rules_blocking, rules)

    async def describe_acls(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            rules = self._rules(conn)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message,
                    "resources": []}  # fmt: skip
        wanted = _filter(body)
        resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for b in acl_mapping.bindings(rules):
            if wanted.matches(b):
                resources.setdefault((b.resource_type, b.name, b.pattern), []).append(
                    {
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission,
                    }
                )
        rows = [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in sorted(resources.items())
        ]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": rows}

    async def create_acls(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        async with self._lock:
            try:
                rules = start = self._rules(conn)
            except KafkaError as exc:
                error = {"error_code": exc.code, "error_message": exc.message}
                return {"throttle_time_ms": 0, "results": [error for _ in body["creations"]]}
            for c in body["creations"]:
                binding = Binding(c["resource_type"], c["resource_name"],
                                  c["resource_pattern_type"], c["principal"], c["host"],
                                  c["operation"], c["permission_type"])  # fmt: skip
                try:
                    rules = acl_mapping.create(rules, binding)
                    results.append({"error_code": 0, "error_message": None})
                except AclRefused as exc:
                    results.append({"error_code": Code.INVALID_REQUEST, "error_message": str(exc)})
            if rules is not start:
                await self._save(rules)
        return {"throttle_time_ms": 0, "results": results}

    async def delete_acls(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        async with self._lock:
            try:
                rules = start = self._rules(conn)
            except KafkaError as exc:
                error = {"error_code": exc.code, "error_message": exc.message, "matching_acls": []}
                return {"throttle_time_ms": 0, "filter_results": [error for _ in body["filters"]]}
            for f in body["filters"]:
                try:
                    rules, gone = acl_mapping.delete(rules, _filter(f))
                except AclRefused as exc:
                    results.append({"error_code": Code.INVALID_REQUEST,
                                    "error_message": str(exc), "matching_acls": []})  # fmt: skip
                    continue
                results.append({"error_code": 0, "error_message": None,
                                "matching_acls": [_matched(b) for b in gone]})  # fmt: skip
            if rules is not start:
                await self._save(rules)
        return {"throttle_time_ms": 0, "filter_results": results}


def _filter(f: dict[str, Any]) -> Filter:
    return Filter(f["resource_type_filter"], f["resource_name_filter"], f["pattern_type_filter"],
                  f["principal_filter"], f["host_filter"], f["operation"],
                  f["permission_type"])  # fmt: skip


def _matched(b: Binding) -> dict[str, Any]:
    return {"error_code": 0, "error_message": None, "resource_type": b.resource_type,
            "resource_name": b.name, "pattern_type": b.pattern, "principal": b.principal,
            "host": b.host, "operation": b.operation, "permission_type": b.permission}  # fmt: skip
