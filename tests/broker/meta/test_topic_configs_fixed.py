"""Kafka's topic configs Wharf accepts without storing (FIXED: only the value it behaves as)
and refuses by name (UNSUPPORTED), through ``checked_configs``."""

from __future__ import annotations

import pytest
from wharf.broker.meta.topic_configs import ConfigError, checked_configs

BROKER = {"message.timestamp.type": "CreateTime", "compression.type": "producer",
          "segment.bytes": "1073741824", "min.insync.replicas": "1",
          "max.message.bytes": "4194304", "unclean.leader.election.enable": "false"}  # fmt: skip


def test_kafka_streams_repartition_configs_store_only_what_wharf_honours() -> None:
    configs = [("cleanup.policy", "delete"), ("segment.bytes", "52428800"),
               ("retention.ms", "-1"), ("message.timestamp.type", "CreateTime"),
               ("compression.type", "uncompressed"), ("min.insync.replicas", "1")]  # fmt: skip
    assert checked_configs(configs, BROKER) == {"cleanup.policy": "delete", "retention.ms": "-1"}


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("message.timestamp.type", "LogAppendTime", "CreateTime only"),
        ("compression.type", "zstd", "uncompressed"),
        ("min.insync.replicas", "2", "minInSyncReplicas (1)"),
        ("max.message.bytes", "1048588", "maxMessageSize (4194304)"),
        ("segment.bytes", "1", "at least 14"),
        ("unclean.leader.election.enable", "true", "in-sync replica"),
        ("preallocate", "true", "not supported by Wharf"),
        ("confluent.placement.constraints", "{}", "Unknown topic config name"),
    ],
)
def test_a_config_wharf_cannot_honour_is_refused_saying_why(
    name: str, value: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        checked_configs([(name, value)], BROKER)
