"""Kafka's own Java stream tools against the real daemon's Kafka port, each restarted
mid-stream (``tests/java/kafka-tools``, ``make java-clients``; two JVMs at once):

- Kafka Connect in distributed mode copies a file through a topic into another file with
  FileStreamSource and FileStreamSink; its worker stops while lines are being copied, more
  lines come while it is down, and a new worker resumes both connectors from its config and
  offset topics: every line arrives, in order, a line twice only if it was in flight at the
  stop (at-least-once). Connect keeps its state in three topics it requires to be compacted
  (it reads their cleanup.policy with DescribeConfigs).
- Kafka Streams counts words (groupBy: a repartition topic; count: a state store and its
  changelog); its first instance closes mid-stream and its state directory is deleted, the
  second restores the store from the changelog: the counts come out exact, at least once and
  (a second run) exactly once (exactly_once_v2: transactions). Streams purges the repartition
  records it has consumed (DeleteRecords).

Then each tool's compacted topics must be compacted (``stream_tools/kafka_io.py``).
``WHARF_STREAM_TOOLS_BOOTSTRAP=host:port`` runs them against another broker (a fresh Apache
Kafka: the programs and checks themselves), where none is expected to fail."""

from __future__ import annotations

import struct
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.broker.kafka.stream_tools import apps, java, kafka_io
from tests.harness import Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONNECT_TOPICS = ["connect-configs", "connect-offsets", "connect-status"]
STREAMS_CHANGELOG = "wharf-wordcount-counts-changelog"


@pytest.fixture(scope="module")
def bootstrap(module_daemons: Daemons) -> str:
    java.require()  # skips before a broker starts
    return apps.tools_bootstrap(module_daemons)


@pytest.fixture(scope="module")
def runs(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return java.run_all(bootstrap, tmp_path_factory.mktemp("kafka-tools"))


def test_kafka_connect_resumes_both_file_connectors_after_a_worker_restart(
    runs: dict[str, dict[str, Any]],
) -> None:
    out = java.result(runs, "connect")
    source, sink = out["source"], out["sink"]
    assert source == [f"line-{i:04d}" for i in range(300)]
    assert out["states_first"] == out["states_second"] == ["RUNNING/RUNNING"] * 2
    assert out["sink_at_stop"] <= 250  # lines 250-299 came while no worker ran
    # Every line, in the source's order (one partition), each once but for lines in flight at
    # the stop: lines 0-199 were in the sink with their offsets flushed before it.
    assert list(dict.fromkeys(sink)) == source, sink
    twice = sorted(line for line, n in Counter(sink).items() if n > 1)
    assert all(int(line[5:]) >= 200 for line in twice), twice
    assert max(Counter(sink).values()) <= 2, twice


def test_kafka_connect_sees_its_internal_topics_compact(runs: dict[str, dict[str, Any]]) -> None:
    out = java.result(runs, "connect")
    assert out["cleanup_policy"] == dict.fromkeys(CONNECT_TOPICS, "compact")


def test_kafka_connect_internal_topics_are_compacted(
    bootstrap: str, runs: dict[str, dict[str, Any]]
) -> None:
    java.result(runs, "connect")
    with ThreadPoolExecutor(len(CONNECT_TOPICS)) as pool:
        checks = list(pool.map(lambda t: kafka_io.compact(bootstrap, t), CONNECT_TOPICS))
    for check in checks:
        kafka_io.assert_compacted(check)


@pytest.mark.parametrize(
    ("run", "app"),
    [("streams", "wharf-wordcount"), ("streams-eos", "wharf-wordcount-eos")],
    ids=["at_least_once", "exactly_once_v2"],
)
def test_kafka_streams_word_count_is_restored_from_its_changelog(
    bootstrap: str, runs: dict[str, dict[str, Any]], run: str, app: str
) -> None:
    out = java.result(runs, run)
    expected = out["expected"]
    assert sum(expected.values()) == 1200 and out["sent"] == 300
    # The close fell mid-stream: the first instance counted some words, not all were sent.
    assert out["counted_by_first"] > 0 and out["sent_at_stop"] < 300, out["timings"]
    # The second instance started with no state directory: its store came from the changelog.
    assert out["restored_by_second"] > 0
    assert out["counts"] == expected
    assert out["cleanup_policy"][f"{app}-counts-changelog"] == "compact"
    # The output topic's last count per word is the store's (exactly_once_v2: its
    # transactions' markers between the records).
    output = "word-counts" + run.removeprefix("streams")
    last = kafka_io.latest(kafka_io.read_log(bootstrap, output))
    assert {k.decode(): struct.unpack(">q", v)[0] for k, v in last.items()} == expected


def test_kafka_streams_purges_its_repartition_topic(runs: dict[str, dict[str, Any]]) -> None:
    out = java.result(runs, "streams")
    assert out["cleanup_policy"]["wharf-wordcount-words-repartition"] == "delete"
    # DeleteRecords after each commit moved the log start past what was consumed.
    assert all(start > 0 for start in out["repartition_log_start"].values()), out


def test_kafka_streams_changelog_is_compacted(
    bootstrap: str, runs: dict[str, dict[str, Any]]
) -> None:
    java.result(runs, "streams")
    kafka_io.assert_compacted(kafka_io.compact(bootstrap, STREAMS_CHANGELOG))
