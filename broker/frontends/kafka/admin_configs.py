"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (admin accounts only under ACL),
and the configs CreateTopics takes: Kafka's topic configs through ``broker/meta/topic_configs``.

- A topic's cleanup and retention configs (``topic_configs.KEYS``: cleanup.policy,
  retention.ms, retention.bytes, segment.ms, the compaction lags and ratio,
  delete.retention.ms) are stored in its ``attributes`` through the core's topic update
  (``AdminCore.update_topic``: on disk when answered, and the store's policy follows from
  there). DescribeConfigs shows a stored value as DYNAMIC_TOPIC_CONFIG, otherwise its default
  (retention.ms: the broker's fileReservedTime, STATIC_BROKER_CONFIG, which is what a topic
  without its own retention keeps).
- ``topic_configs.FIXED`` (message.timestamp.type, compression.type, segment.bytes,
  min.insync.replicas, max.message.bytes, unclean.leader.election.enable): read-only, shown
  with what Wharf does; a create or alter is accepted only with that value (segment.bytes:
  any size), anything else is INVALID_CONFIG saying why; every other name is INVALID_CONFIG.
- The broker (resource type 4): its settings under Kafka's broker names, all read-only: Wharf
  applies its settings at start only (``broker/frontends/remoting/broker_config.py`` says why), so an
  alter of one is INVALID_REQUEST naming the setting to change and restart with, unless the
  value is the current one (a tool re-applying what it read).
- AlterConfigs replaces the topic's whole set (a stored config not named goes back to its
  default), IncrementalAlterConfigs changes the named ones: SET, DELETE (back to the default),
  APPEND / SUBTRACT on cleanup.policy (Kafka's one list config here). ``validate_only``
  checks everything and changes nothing. A resource is changed whole or not at all.
- In a cluster a topic's configs are this broker group's copy's (as CreateTopics makes it).
"""

from __future__ import annotations

from typing import Any

from wharf.broker.core.send import is_own_topic
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code, KafkaError, code_for
from wharf.broker.frontends.kafka.server import KafkaConnection
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.meta import topic_configs
from wharf.broker.meta.topic_configs import FIXED, KEYS, ConfigError
from wharf.broker.meta.topics import TopicConfig

__all__ = ["BROKER", "TOPIC", "ConfigHandlers"]

TOPIC = 2
BROKER = 4
# Kafka's ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = frozenset({topic_configs.CLEANUP_POLICY})  # APPEND / SUBTRACT apply to these
# FIXED configs whose value is a broker setting's (the others are Kafka's defaults)
FROM_BROKER = frozenset({"segment.bytes", "min.insync.replicas", "max.message.bytes"})


class ConfigHandlers:
    def __init__(self, env: KafkaEnv) -> None:
        self.env = env

    # --- the broker's figures ---------------------------------------------------------------------
    def fixed_values(self) -> dict[str, str]:
        """What Wharf does for every topic, per FIXED config (the broker's settings)."""
        store = self.env.ctx.port.store_config
        return {
            "message.timestamp.type": "CreateTime",
            "compression.type": "producer",
            "segment.bytes": str(store.mapped_file_size_commit_log),
            "min.insync.replicas": str(store.min_in_sync_replicas),
            "max.message.bytes": str(store.max_message_size),
            "unclean.leader.election.enable": "false",
        }

    def default_retention_ms(self) -> str:
        return str(self.env.ctx.port.store_config.file_reserved_time * 3_600_000)

    def broker_settings(self) -> list[tuple[str, str, str]]:
        """(Kafka broker config, value, Wharf setting it comes from)."""
        port = self.env.ctx.port
        store, defaults = port.store_config, port.topic_defaults
        hours = store.file_reserved_time
        return [
            ("log.retention.hours", str(hours), "fileReservedTime"),
            ("log.retention.ms", str(hours * 3_600_000), "fileReservedTime"),
            ("log.segment.bytes", str(store.mapped_file_size_commit_log),
             "mappedFileSizeCommitLog"),
            ("message.max.bytes", str(store.max_message_size), "maxMessageSize"),
            ("min.insync.replicas", str(store.min_in_sync_replicas), "minInSyncReplicas"),
            ("num.partitions", str(defaults.queue_nums), "defaultTopicQueueNums"),
            ("auto.create.topics.enable", str(defaults.auto_create).lower(),
             "autoCreateTopicEnable"),
        ]  # fmt: skip

    def create_attributes(self, configs: list[dict[str, Any]]) -> dict[str, str]:
        """CreateTopics' configs as the attributes to store; KafkaError INVALID_CONFIG."""
        try:
            return topic_configs.checked_configs(
                [(c["name"], c["value"]) for c in configs], self.fixed_values()
            )
        except ConfigError as exc:
            raise KafkaError(Code.INVALID_CONFIG, str(exc)) from None

    # --- DescribeConfigs --------------------------------------------------------------------------
    async def describe_configs(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        results = []
        for resource in body["resources"]:
            kind, name = resource["resource_type"], resource["resource_name"]
            row: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": kind,
                "resource_name": name,
                "configs": [],
            }
            try:
                if not admin:
                    raise KafkaError(
                        Code.CLUSTER_AUTHORIZATION_FAILED, "DescribeConfigs needs an admin"
                    )
                keys = resource["configuration_keys"]
                row["configs"] = [
                    c for c in self._rows(kind, name) if keys is None or c["name"] in keys
                ]
            except KafkaError as exc:
                row["error_code"], row["error_message"] = exc.code, exc.message
            results.append(row)
        return {"throttle_time_ms": 0, "results": results}

    def _rows(self, kind: int, name: str) -> list[dict[str, Any]]:
        if kind == BROKER:
            return [_config(n, v, STATIC_BROKER_CONFIG, True) for n, v, _ in self.broker_settings()]
        if kind != TOPIC:
            raise KafkaError(Code.INVALID_REQUEST, f"resource type {kind} is not described")
        topic = self._topic(name)
        rows = []
        for key in KEYS.values():
            value = topic.attributes.get(key.name)
            if value is not None:
                rows.append(_config(key.name, value, DYNAMIC_TOPIC_CONFIG, False))
            elif key.name == "retention.ms":
                rows.append(
                    _config(key.name, self.default_retention_ms(), STATIC_BROKER_CONFIG, False)
                )
            else:
                rows.append(_config(key.name, key.default, DEFAULT_CONFIG, False))
        fixed = self.fixed_values()
        for config in FIXED:
            source = STATIC_BROKER_CONFIG if config in FROM_BROKER else DEFAULT_CONFIG
            rows.append(_config(config, fixed[config], source, True))
        return rows

    def _topic(self, name: str) -> TopicConfig:
        """A topic Kafka clients see (not the broker's own: %RETRY%, %DLQ%, ...)."""
        topic = None if is_own_topic(name) else self.env.ctx.port.topic(name)
        if topic is None:
            raise KafkaError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    # --- AlterConfigs, IncrementalAlterConfigs ----------------------------------------------------
    async def alter_configs(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._alter(conn, body, incremental=False)

    async def incremental_alter_configs(
        self, conn: KafkaConnection, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._alter(conn, body, incremental=True)

    async def _alter(
        self, conn: KafkaConnection, body: dict[str, Any], incremental: bool
    ) -> dict[str, Any]:
        admin = self.env.allowed(conn, "admin", "", Perm.ANY)
        responses = []
        for resource in body["resources"]:
            kind, name = resource["resource_type"], resource["resource_name"]
            row = {"error_code": 0, "error_message": None, "resource_type": kind,
                   "resource_name": name}  # fmt: skip
            try:
                if not admin:
                    raise KafkaError(
                        Code.CLUSTER_AUTHORIZATION_FAILED, "AlterConfigs needs an admin"
                    )
                if kind == BROKER:
                    self._check_broker(resource["configs"], incremental)
                elif kind == TOPIC:
                    await self._alter_topic(name, resource["configs"], incremental,
                                            bool(body["validate_only"]))  # fmt: skip
                else:
                    raise KafkaError(
                        Code.INVALID_REQUEST, f"resource type {kind} has no configs in Wharf"
                    )
            except KafkaError as exc:
                row["error_code"], row["error_message"] = exc.code, exc.message
            responses.append(row)
        return {"throttle_time_ms": 0, "responses": responses}

    def _check_broker(self, configs: list[dict[str, Any]], incremental: bool) -> None:
        settings = {n: (v, setting) for n, v, setting in self.broker_settings()}
        refused = []
        for config in configs:
            name, value = config["name"], config["value"]
            found = settings.get(name)
            same = found is not None and value == found[0]
            if incremental and config["config_operation"] != SET:
                same = False
            if found is None:
                refused.append(f"{name}: not a config of a Wharf broker")
            elif not same:
                refused.append(f"{name}: read at start from {found[1]} (now {found[0]}); "
                               f"change {found[1]} and restart the broker")  # fmt: skip
        if refused:
            raise KafkaError(Code.INVALID_REQUEST, "Cannot update these configs dynamically "
                             "(Wharf has no dynamic broker configs): " + "; ".join(refused))  # fmt: skip

    async def _alter_topic(
        self, name: str, configs: list[dict[str, Any]], incremental: bool, validate_only: bool
    ) -> None:
        port = self.env.ctx.port
        topic = self._topic(name)
        current = {k: v for k, v in topic.attributes.items() if k in KEYS}
        wanted = _incremental(current, configs) if incremental else _replaced(configs)
        stored = self.create_attributes([{"name": n, "value": v} for n, v in wanted.items()])
        # Through the core's topic update: an empty value removes a stored config.
        change = {n: "" for n in current if n not in stored}
        change.update({n: v for n, v in stored.items() if current.get(n) != v})
        if validate_only or not change:
            return
        try:
            await port.admin.update_topic(name, None, None, None, change)
        except (InvalidArgumentError, NotFoundError) as exc:
            raise KafkaError(code_for(exc), str(exc)) from None


def _replaced(configs: list[dict[str, Any]]) -> dict[str, str | None]:
    """AlterConfigs: the whole set named (what is not named goes back to its default)."""
    return {c["name"]: c["value"] for c in configs}


def _incremental(current: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str | None]:
    """IncrementalAlterConfigs: the stored configs with the operations applied, in order."""
    out: dict[str, str | None] = dict(current)
    for config in configs:
        name, op, value = config["name"], config["config_operation"], config["value"]
        if op == SET:
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
            if name not in KEYS and name not in FIXED:
                out[name] = None  # an unknown name is still refused by name
        elif op in (APPEND, SUBTRACT):
            if name not in LIST_CONFIGS:
                raise KafkaError(Code.INVALID_CONFIG, f"Config value append or subtract is not "
                                 f"allowed for config key {name}: it is not a list")  # fmt: skip
            items = [p for p in (out.get(name) or KEYS[name].default).split(",") if p]
            given = [p.strip() for p in (value or "").split(",") if p.strip()]
            if op == APPEND:
                items += [p for p in given if p not in items]
            else:
                items = [p for p in items if p not in given]
            # An empty list is refused by the check, as Kafka refuses an empty cleanup.policy.
            out[name] = ",".join(items)
        else:
            raise KafkaError(Code.INVALID_REQUEST, f"unknown config operation {op} for {name}")
    return out


def _config(name: str, value: str, source: int, read_only: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source == DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
    }
