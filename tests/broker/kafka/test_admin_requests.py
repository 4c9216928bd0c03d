"""The admin requests' corners byte by byte (the tests' raw client against an in-process
broker): what ApiVersions offers, validate_only leaving topics alone, the broker's own topics
invisible to config requests, the group refusals, and a topic's configs reaching the topic
table through the core (test_admin_clients.py runs the same APIs with real clients)."""

from __future__ import annotations

from wharf.broker.frontends.kafka.errors import Code

from tests.broker.kafka.test_server import produce, started
from tests.inproc import InProcFactory

TOPIC, BROKER = 2, 4
SET, APPEND = 0, 2


def create_row(name: str, partitions: int = 2, **configs: str) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1,
            "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}  # fmt: skip


async def test_admin_apis_are_offered_and_validate_only_changes_nothing(
    inproc_broker: InProcFactory,
) -> None:
    kafka, client = await started(inproc_broker)
    offered = {k["api_key"]: (k["min_version"], k["max_version"])
               for k in (await client.call(18, 0, {}))["api_keys"]}  # fmt: skip
    assert {k: offered[k] for k in (29, 30, 31, 32, 33, 37, 42, 44, 47, 50, 51)} == {
        29: (0, 1), 30: (0, 1), 31: (0, 1), 32: (0, 2), 33: (0, 1), 37: (0, 1), 42: (0, 1),
        44: (0, 1), 47: (0, 0), 50: (0, 0), 51: (0, 0),
    }  # fmt: skip
    topics = kafka.controller.ctx.topics
    made = await client.call(19, 1, {"topics": [create_row("t", 2, **{"cleanup.policy": "compact"})],
                                     "timeout_ms": 5000, "validate_only": False})  # fmt: skip
    assert made["topics"][0]["error_code"] == 0

    grow = {"topics": [{"name": "t", "count": 4, "assignments": None}], "timeout_ms": 5000,
            "validate_only": True}  # fmt: skip
    assert (await client.call(37, 1, grow))["results"][0]["error_code"] == 0
    alter = {"resources": [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": SET, "value": "1000"}]}],
        "validate_only": True}  # fmt: skip
    assert (await client.call(44, 0, alter))["responses"][0]["error_code"] == 0
    assert topics.require("t").read_queue_nums == 2
    assert topics.require("t").attributes == {"cleanup.policy": "compact"}

    alter["validate_only"] = False
    assert (await client.call(44, 1, alter))["responses"][0]["error_code"] == 0  # flexible
    assert topics.require("t").attributes == {"cleanup.policy": "compact", "retention.ms": "1000"}
    appended = {"resources": [{"resource_type": TOPIC, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": APPEND, "value": "1"}]}],
        "validate_only": False}  # fmt: skip
    row = (await client.call(44, 0, appended))["responses"][0]
    assert row["error_code"] == Code.INVALID_CONFIG and "not a list" in row["error_message"]
    await client.close()
    await kafka.close()


async def test_the_brokers_own_topics_and_unknown_groups_are_refused(
    inproc_broker: InProcFactory,
) -> None:
    kafka, client = await started(inproc_broker)
    await produce(client, "t", 0, b"x")
    kafka.controller.ctx.topics.ensure_system("%RETRY%g", 1)
    describe = {"resources": [{"resource_type": TOPIC, "resource_name": "%RETRY%g",
                               "configuration_keys": None}], "include_synonyms": False}  # fmt: skip
    row = (await client.call(32, 1, describe))["results"][0]
    assert row["error_code"] == Code.UNKNOWN_TOPIC_OR_PARTITION
    grow = {"topics": [{"name": "%RETRY%g", "count": 4, "assignments": None}],
            "timeout_ms": 5000, "validate_only": False}  # fmt: skip
    assert (await client.call(37, 0, grow))["results"][0]["error_code"] == (
        Code.UNKNOWN_TOPIC_OR_PARTITION
    )
    deleted = await client.call(42, 0, {"groups_names": ["nobody", ""]})
    assert [r["error_code"] for r in deleted["results"]] == [
        Code.GROUP_ID_NOT_FOUND, Code.INVALID_GROUP_ID]  # fmt: skip
    offsets = {
        "group_id": "nobody",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}],
    }
    assert (await client.call(47, 0, offsets))["error_code"] == Code.GROUP_ID_NOT_FOUND
    broker = {"resources": [{"resource_type": BROKER, "resource_name": "0", "configs": [
        {"name": "num.partitions", "value": "4"}, {"name": "log.flush.interval.ms", "value": "1"}]}],
        "validate_only": False}  # fmt: skip
    row = (await client.call(33, 0, broker))["responses"][0]
    assert row["error_code"] == Code.INVALID_REQUEST  # num.partitions 4 is its value already
    assert "log.flush.interval.ms: not a config" in row["error_message"]
    assert "num.partitions" not in row["error_message"]
    acls = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}  # fmt: skip
    assert (await client.call(29, 1, acls))["error_code"] == Code.SECURITY_DISABLED
    await client.close()
    await kafka.close()


async def test_a_group_with_a_member_mid_join_is_not_deleted(inproc_broker: InProcFactory) -> None:
    kafka, client = await started(inproc_broker)
    join = {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip
    assert (await client.call(11, 4, join))["error_code"] == Code.MEMBER_ID_REQUIRED
    deleted = await client.call(42, 1, {"groups_names": ["g"]})
    assert deleted["results"][0]["error_code"] == Code.NON_EMPTY_GROUP
    await client.close()
    await kafka.close()
