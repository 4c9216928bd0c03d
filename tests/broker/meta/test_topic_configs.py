"""The topic config table: Kafka's checks and wording, RocketMQ's spelling, the store policy."""

from __future__ import annotations

import pytest
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.meta import topic_configs
from wharf.broker.meta.topic_configs import ConfigError, checked, policy_of, rocketmq_view
from wharf.broker.meta.topics import checked_attributes
from wharf.store.retention.policy import DEFAULT_POLICY


def test_values_are_stored_in_kafkas_form() -> None:
    assert checked("cleanup.policy", "delete, compact") == "compact,delete"
    assert checked("cleanup.policy", "COMPACTION") == "compact"  # RocketMQ 5's spelling
    assert checked("retention.ms", " 1000 ") == "1000"
    assert checked("min.cleanable.dirty.ratio", "0.01") == "0.01"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("cleanup.policy", "shred", "String must be one of: compact, delete"),
        ("retention.ms", "soon", "Not a number of type LONG"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
        ("segment.ms", "0", "at least 1"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        ("retention.ms", None, "Null value"),
    ],
)
def test_bad_values_are_refused_in_kafkas_words(name: str, value: str | None, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        checked(name, value)


def test_the_policy_follows_the_attributes() -> None:
    assert policy_of({}) == DEFAULT_POLICY
    policy = policy_of(
        checked_attributes(
            {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": ".01"}
        )
    )
    assert (policy.compact, policy.delete, policy.segment_ms) == (True, False, 1000)
    assert policy.min_cleanable_dirty_ratio == 0.01
    assert policy.retention_ms is None  # the store's own age rule
    both = policy_of({"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    assert (both.compact, both.delete, both.retention_ms) == (True, True, -1)


def test_topic_attributes_check_cleanup_configs_and_keep_others() -> None:
    stored = checked_attributes({"cleanup.policy": "COMPACTION", "queue.type": "x"})
    assert stored == {"cleanup.policy": "compact", "queue.type": "x"}
    assert rocketmq_view(stored)["cleanup.policy"] == "COMPACTION"
    with pytest.raises(InvalidArgumentError, match=r"cleanup\.policy"):
        checked_attributes({"cleanup.policy": "never"})
    assert set(topic_configs.KEYS) >= {"cleanup.policy", "retention.ms", "retention.bytes"}


def test_rocketmq_5s_plus_spelling_is_stored_plainly() -> None:
    stored = checked_attributes({"cleanup.policy": "delete", "+cleanup.policy": "COMPACTION"})
    assert stored == {"cleanup.policy": "compact"}
