"""Kafka's admin surface with real clients against the daemon: confluent-kafka's AdminClient
(librdkafka 2.16) creates topics with the configs Kafka Streams, Connect and the stream tools
send, describes and alters them (AlterConfigs, IncrementalAlterConfigs, validate_only), adds
partitions, deletes consumer groups; kafka-python deletes a group's offsets (OffsetDelete).
With aclEnable: ACLs created, described and deleted through confluent-kafka map onto the
accounts file and apply at once, what does not map is refused with why, and SCRAM-SHA-512
logs in. Every API the clients call is answered (librdkafka 2.x aborts when an AdminClient
that saw _UNSUPPORTED_FEATURE is freed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.broker.acl_helpers import write_acl
from tests.harness import BrokerProcess, Daemons

with warnings.catch_warnings():  # kafka-python 3 reads its schemas with a deprecated call
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import (
        ACLResourcePatternType as ACLPatternType,
    )
    from kafka.admin import (
        ResourceType as ACLResourceType,
    )
    from kafka.errors import SecurityDisabledError
    from kafka.structs import TopicPartition

SETTINGS = {"defaultTopicQueueNums": 2, "mappedFileSizeCommitLog": 16 << 20}
KAFKA = ["--kafka-listen", "127.0.0.1:0"]
ACL = """
accounts:
  - accessKey: root
    secretKey: root-secret
    admin: true
  - accessKey: app
    secretKey: app-secret
"""
ROOT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "root", "sasl.password": "root-secret"}  # fmt: skip


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def plain_broker(module_daemons: Daemons) -> Iterator[BrokerProcess]:
    yield module_daemons.broker(settings=SETTINGS, extra_args=KAFKA)


@pytest.fixture
def plain(plain_broker: BrokerProcess) -> str:
    """The plain broker's Kafka address now (a test restarts it)."""
    return plain_broker.kafka_endpoint


@pytest.fixture(scope="module")
def secured(module_daemons: Daemons) -> Iterator[BrokerProcess]:
    broker = module_daemons.broker(
        settings={**SETTINGS, "aclEnable": True}, extra_args=KAFKA, start=False
    )
    write_acl(broker.store_dir, ACL)
    yield broker.start()


def admin(bootstrap: str, **extra: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **extra})


def outcome(future: Any) -> tuple[int, str]:
    """(Kafka error code, message) of an admin future; (0, "") when it succeeded."""
    try:
        future.result(timeout=15)
    except KafkaException as exc:
        error = exc.args[0]
        return error.code(), error.str()
    return 0, ""


def topic_configs(client: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    [future] = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return dict(future.result(timeout=15))


def test_create_topics_takes_the_tools_configs_and_refuses_what_wharf_cannot_honour(
    plain: str,
) -> None:
    client = admin(plain)
    changelog, repartition = fresh("changelog"), fresh("repartition")
    topics = [
        # Kafka Streams' changelog and repartition topics, as it creates them
        NewTopic(changelog, 2, 1, config={"cleanup.policy": "compact",
                                          "message.timestamp.type": "CreateTime",
                                          "min.insync.replicas": "1"}),
        NewTopic(repartition, 1, 1, config={"cleanup.policy": "delete", "retention.ms": "-1",
                                            "segment.bytes": "52428800"}),
        NewTopic(fresh("appended"), 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
        NewTopic(fresh("soon"), 1, 1, config={"retention.ms": "soon"}),
        NewTopic(fresh("flushed"), 1, 1, config={"flush.messages": "1"}),
        NewTopic("__consumer_offsets", 1, 1),
        NewTopic("t" * 250, 1, 1),  # Kafka's limit is 249 (a 249-character name: test_long_names)
    ]  # fmt: skip
    results = [outcome(f) for f in client.create_topics(topics).values()]
    assert results[:2] == [(0, ""), (0, "")]
    appended, soon, flushed, internal, long_name = results[2:]
    assert appended[0] == KafkaError.INVALID_CONFIG and "CreateTime only" in appended[1]
    assert soon == (KafkaError.INVALID_CONFIG,
                    "Invalid value soon for configuration retention.ms: Not a number of type LONG")  # fmt: skip
    assert flushed == (
        KafkaError.INVALID_CONFIG,
        "Topic config flush.messages is not supported by Wharf",
    )
    assert internal[0] == KafkaError.TOPIC_EXCEPTION and "Wharf keeps group offsets" in internal[1]
    assert long_name[0] == KafkaError.TOPIC_EXCEPTION and "limit is 249" in long_name[1]

    configs = topic_configs(client, changelog)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["max.message.bytes"].is_read_only
    configs = topic_configs(client, repartition)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == ("-1", "delete")


def test_topic_configs_are_altered_and_broker_configs_are_static(plain: str) -> None:
    client = admin(plain)
    name = fresh("altered")
    assert outcome(client.create_topics([NewTopic(name, 1, 1)])[name]) == (0, "")
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])  # fmt: skip
    dry = client.incremental_alter_configs([resource], validate_only=True)
    assert outcome(dry[resource]) == (0, "")
    assert topic_configs(client, name)["cleanup.policy"].value == "delete"  # unchanged
    assert outcome(client.incremental_alter_configs([resource])[resource]) == (0, "")
    configs = topic_configs(client, name)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == (
        "60000", "compact,delete")  # fmt: skip

    again = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    ])  # fmt: skip
    assert outcome(client.incremental_alter_configs([again])[again]) == (0, "")
    configs = topic_configs(client, name)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    # AlterConfigs replaces the whole set: cleanup.policy goes back to its default
    whole = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.bytes": "1048576"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka's, for AlterConfigs itself
        replaced = client.alter_configs([whole])
    assert outcome(replaced[whole]) == (0, "")
    configs = topic_configs(client, name)
    assert (configs["cleanup.policy"].value, configs["retention.bytes"].value) == (
        "delete", "1048576")  # fmt: skip

    bad = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("max.message.bytes", "1", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    code, message = outcome(client.incremental_alter_configs([bad])[bad])
    assert code == KafkaError.INVALID_CONFIG and "maxMessageSize" in message, message

    broker = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.hours", "1", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    code, message = outcome(client.incremental_alter_configs([broker])[broker])
    assert code == KafkaError.INVALID_REQUEST and "fileReservedTime" in message, message
    [described] = client.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    assert described.result(timeout=15)["log.retention.hours"].value == "72"


def test_topic_configs_survive_a_kill_right_after_the_answer(
    plain_broker: BrokerProcess,
) -> None:
    client = admin(plain_broker.kafka_endpoint)
    name = fresh("kept")
    topic = NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})
    assert outcome(client.create_topics([topic])[name]) == (0, "")
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    assert outcome(client.incremental_alter_configs([resource])[resource]) == (0, "")
    del client
    plain_broker.kill()  # answered means on disk
    plain_broker.start()
    configs = topic_configs(admin(plain_broker.kafka_endpoint), name)
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value) == ("compact", "-1")
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_kafkajs_admin_creates_describes_alters_and_grows(plain: str) -> None:
    node = shutil.which("node")
    node_dir = Path(__file__).with_name("node")
    assert node and (node_dir / "node_modules" / "kafkajs").is_dir(), "kafkajs: make test"
    name = fresh("js")
    done = subprocess.run([node, "admin.js", plain, name], cwd=node_dir, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    got = json.loads(done.stdout)
    assert got["created"] == {"ok": True}
    assert got["refused"]["inner"] == ["INVALID_CONFIG"], got["refused"]
    assert got["described"]["ok"] == {"cleanup.policy": "compact", "retention.ms": "259200000"}
    assert got["describedAfter"]["ok"]["retention.ms"] == "60000"
    assert got["partitions"] == {"ok": True} and got["metadata"] == {"ok": 3}
    assert got["deletedGroups"]["inner"] == ["GROUP_ID_NOT_FOUND"], got["deletedGroups"]


def test_create_partitions_adds_queues(plain: str) -> None:
    client = admin(plain)
    name = fresh("grown")
    assert outcome(client.create_topics([NewTopic(name, 2, 1)])[name]) == (0, "")
    assert outcome(client.create_partitions([NewPartitions(name, 4)])[name]) == (0, "")
    assert len(client.list_topics(name, timeout=10).topics[name].partitions) == 4
    code, message = outcome(client.create_partitions([NewPartitions(name, 3)])[name])
    assert code == KafkaError.INVALID_PARTITIONS and "currently has 4" in message
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": plain, "topic.metadata.refresh.interval.ms": 500})
    producer.produce(name, b"v", partition=3, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert errors == [None]


def consume_and_commit(bootstrap: str, topic: str, group: str) -> Consumer:
    """A member of ``group`` that read ``topic``'s records and committed; still joined."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})  # fmt: skip
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            consumer.commit(asynchronous=False)
            return consumer
    raise AssertionError("no record read")


def test_groups_and_their_offsets_are_deleted_once_nobody_uses_them(plain: str) -> None:
    client = admin(plain)
    topic, group = fresh("read"), fresh("g")
    assert outcome(client.create_topics([NewTopic(topic, 1, 1)])[topic]) == (0, "")
    producer = Producer({"bootstrap.servers": plain})
    producer.produce(topic, b"v", partition=0)
    producer.flush(15)
    consumer = consume_and_commit(plain, topic, group)
    try:
        [busy] = client.delete_consumer_groups([group]).values()
        assert outcome(busy)[0] == KafkaError.NON_EMPTY_GROUP
        kafka_admin = KafkaAdminClient(bootstrap_servers=plain)
        try:
            in_use = kafka_admin.delete_group_offsets(group, [_tp(topic)])
            assert [e.__name__ for e in in_use.values()] == ["GroupSubscribedToTopicError"]
        finally:
            kafka_admin.close()
    finally:
        consumer.close()
    kafka_admin = KafkaAdminClient(bootstrap_servers=plain)
    try:
        assert set(kafka_admin.list_group_offsets(group)[group]) == {_tp(topic)}
        gone = kafka_admin.delete_group_offsets(group, [_tp(topic)])
        assert [e.__name__ for e in gone.values()] == ["NoError"]
        assert not kafka_admin.list_group_offsets(group).get(group)
    finally:
        kafka_admin.close()
    [deleted] = client.delete_consumer_groups([group]).values()
    assert outcome(deleted) == (0, "")
    [unknown] = client.delete_consumer_groups([group]).values()
    assert outcome(unknown)[0] == KafkaError.GROUP_ID_NOT_FOUND


def _tp(topic: str) -> TopicPartition:
    return TopicPartition(topic, 0)


ANY: Any = None  # a filter's "any" (confluent-kafka's stubs type these str)


def every_binding() -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, ANY, ResourcePatternType.ANY, ANY, ANY,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def _acl(name: str, op: AclOperation, kind: ResourceType = ResourceType.TOPIC,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL,
         principal: str = "User:app", host: str = "*",
         permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def test_acls_map_onto_the_accounts_and_apply_at_once(secured: BrokerProcess) -> None:
    bootstrap = secured.kafka_endpoint
    client = admin(bootstrap, **ROOT)
    app = {**ROOT, "sasl.username": "app", "sasl.password": "app-secret",
           "bootstrap.servers": bootstrap}  # fmt: skip
    assert outcome(client.create_topics([NewTopic("orders", 1, 1)])["orders"]) == (0, "")
    # before any ACL, the account may not write
    errors: list[Any] = []
    producer = Producer({**app, "message.timeout.ms": 5000})
    producer.produce("orders", b"no", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    wanted = [_acl("orders", AclOperation.WRITE), _acl("orders", AclOperation.DESCRIBE),
              _acl("orders-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
              _acl("billing", AclOperation.READ, kind=ResourceType.GROUP)]  # fmt: skip
    refused = [_acl("orders", AclOperation.CREATE),
               _acl("kafka-cluster", AclOperation.ALTER, kind=ResourceType.BROKER),
               _acl("orders", AclOperation.WRITE, host="10.0.0.1"),
               _acl("orders", AclOperation.WRITE, principal="User:ghost"),
               _acl("orders-eu", AclOperation.WRITE)]  # would lose READ of "orders-"  # fmt: skip
    results = {b: outcome(f) for b, f in client.create_acls(wanted + refused).items()}
    assert [results[b] for b in wanted] == [(0, "")] * 4
    messages = [results[b] for b in refused]
    assert all(code == KafkaError.INVALID_REQUEST for code, _ in messages), messages
    assert "READ (SUB) and WRITE (PUB)" in messages[0][1]
    assert "admin flag" in messages[1][1] and "whiteRemoteAddress" in messages[2][1]
    assert "wharf acl user create ghost" in messages[3][1]
    assert "Wharf uses the most specific entry alone" in messages[4][1]

    stored = yaml.safe_load((secured.store_dir / "config" / "plain_acl.yml").read_text())
    app_account = next(a for a in stored["accounts"] if a["accessKey"] == "app")
    assert app_account["topicPerms"] == ["orders=PUB", "orders-*=SUB"]
    assert app_account["groupPerms"] == ["billing=SUB"]

    errors.clear()
    producer = Producer({**app, "message.timeout.ms": 10000})
    producer.produce("orders", b"yes", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(15)
    assert errors == [None]  # applied at once, no reload wait

    everything = every_binding()
    described = client.describe_acls(everything).result(timeout=15)
    assert {(b.name, b.resource_pattern_type, b.operation) for b in described} == {
        ("orders", ResourcePatternType.LITERAL, AclOperation.WRITE),
        ("orders-", ResourcePatternType.PREFIXED, AclOperation.READ),
        ("billing", ResourcePatternType.LITERAL, AclOperation.READ),
    }
    writes = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, ANY,
                              ANY, AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
    [deleted] = client.delete_acls([writes]).values()
    assert [b.name for b in deleted.result(timeout=15)] == ["orders"]
    assert len(client.describe_acls(everything).result(timeout=15)) == 2


def test_scram_sha_512_logs_in_and_credentials_and_acls_are_answered(
    secured: BrokerProcess, plain: str
) -> None:
    client = admin(secured.kafka_endpoint, **ROOT)
    assert "__consumer_offsets" not in client.list_topics(timeout=10).topics  # logged in
    wrong = admin(secured.kafka_endpoint, **{**ROOT, "sasl.password": "wrong"})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=3)
    # every account has both SCRAM mechanisms (derived from its secret); none can be set
    described = client.describe_user_scram_credentials(["app", "ghost"])
    app = described["app"].result(timeout=15)
    assert {(i.mechanism, i.iterations) for i in app.scram_credential_infos} == {
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)}  # fmt: skip
    assert outcome(described["ghost"])[0] == KafkaError.RESOURCE_NOT_FOUND
    upsert = UserScramCredentialUpsertion(
        "app", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"other-secret"
    )
    code, message = outcome(client.alter_user_scram_credentials([upsert])["app"])
    assert code == KafkaError.INVALID_REQUEST and "wharf acl user create" in message
    everything = every_binding()
    # aclEnable off: SECURITY_DISABLED, as Kafka without an authorizer (librdkafka answers an
    # empty list for it; kafka-python raises)
    open_broker = admin(plain)
    assert open_broker.describe_acls(everything).result(timeout=15) == []
    kafka_admin = KafkaAdminClient(bootstrap_servers=plain)
    try:
        with pytest.raises(SecurityDisabledError):
            kafka_admin.describe_acls(
                ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(ACLResourceType.ANY, None, ACLPatternType.ANY))
            )  # fmt: skip
    finally:
        kafka_admin.close()
