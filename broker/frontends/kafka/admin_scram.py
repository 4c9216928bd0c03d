"""DescribeUserScramCredentials and AlterUserScramCredentials (admin accounts only).

Wharf's SCRAM credentials are derived from each ACL account's secret (``sasl.py``): every
account has SCRAM-SHA-256 and SCRAM-SHA-512 at 4096 iterations, so Describe lists the
accounts with both (a name that is no account: RESOURCE_NOT_FOUND, as Kafka answers for a user
without credentials; named twice: DUPLICATE_RESOURCE). Alter is refused per user: a salted
password cannot become an account (PLAIN and the RocketMQ protocols' signatures need the
secret itself); accounts and secrets come from ``wharf acl user create``. Without aclEnable no
account exists: Describe lists none.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.frontends.kafka.sasl import ITERATIONS
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm

__all__ = ["ScramAdminHandlers"]

SCRAM_SHA_256, SCRAM_SHA_512 = 1, 2  # Kafka's ScramMechanism
_BOTH = [{"mechanism": m, "iterations": ITERATIONS} for m in (SCRAM_SHA_256, SCRAM_SHA_512)]
_NOT_ADMIN = "SCRAM credential requests need an admin"
_ALTER = (
    "Wharf derives SCRAM credentials from the account's secret in plain_acl.yml: create the "
    "account with wharf acl user create (a salted password cannot serve PLAIN or the RocketMQ "
    "protocols' signatures)"
)


class ScramAdminHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env

    async def describe(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        if not self.env.allowed(conn, "admin", "", Perm.ANY):
            return {"throttle_time_ms": 0, "error_code": Code.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": _NOT_ADMIN, "results": []}  # fmt: skip
        acl = self.env.acl
        accounts = acl.rules.accounts if acl is not None else {}
        asked = body["users"]
        names = sorted(accounts) if asked is None else [u["name"] for u in asked]
        counts = Counter(names)
        results = []
        for name in dict.fromkeys(names):
            row: dict[str, Any] = {"user": name, "error_code": 0, "error_message": None,
                                   "credential_infos": []}  # fmt: skip
            if counts[name] > 1:
                row["error_code"] = Code.DUPLICATE_RESOURCE
                row["error_message"] = "Cannot describe SCRAM credentials for the same user twice"
            elif name not in accounts:
                row["error_code"] = Code.RESOURCE_NOT_FOUND
                row["error_message"] = "Attempt to describe a user credential that does not exist"
            else:
                row["credential_infos"] = _BOTH
            results.append(row)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}

    async def alter(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        code, message = (
            (Code.INVALID_REQUEST, _ALTER)
            if admin
            else (Code.CLUSTER_AUTHORIZATION_FAILED, _NOT_ADMIN)
        )
        users = dict.fromkeys(u["name"] for u in (*body["deletions"], *body["upsertions"]))
        results = [{"user": u, "error_code": code, "error_message": message} for u in users]
        return {"throttle_time_ms": 0, "results": results}
