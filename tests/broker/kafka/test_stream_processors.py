"""Python stream processors with state, against the real daemon's Kafka port: a quixstreams
application (at-least-once, and exactly-once: transactions) and a faust-streaming
application, each counting per key with its state in a changelog topic, restarted with its
local state gone (quixstreams mid-stream, faust between two bursts of records;
``stream_tools/apps.py``: the scenario; ``stream_tools/*_app.py``: the applications, run in
the ``make stream-tools`` venv). Each must restore its counts from the changelog (the counts
come out exact), and its changelog must be compacted (``stream_tools/kafka_io.py``: the
latest value per key, not every version). ``WHARF_STREAM_TOOLS_BOOTSTRAP=host:port`` runs
them against another broker (a fresh Apache Kafka: the applications and checks themselves),
where none is expected to fail."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.broker.kafka.stream_tools import apps, kafka_io
from tests.harness import Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUIX_CHANGELOG = "changelog__qx-wordcount--qx-words--default"
FAUST_CHANGELOG = "fs-wordcount-counts-changelog"


@pytest.fixture(scope="module")
def bootstrap(module_daemons: Daemons) -> str:
    apps.streams_python()  # skips before a broker starts
    return apps.tools_bootstrap(module_daemons)


@pytest.fixture(scope="module")
def runs(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, apps.CountRun]:
    """The scenarios, quixstreams' two in turn beside faust's (own topics and groups): most
    of their time is start-ups and group joins. A failed one raises where a test asks."""

    def quix(guarantee: str) -> apps.CountRun:
        suffix = "-eos" if guarantee == "exactly-once" else ""
        return apps.count_across_a_restart(
            bootstrap, tmp_path_factory.mktemp(f"quix{suffix}"), "quix_app.py",
            f"qx-words{suffix}", f"qx-counts{suffix}", args=(guarantee,),
        )  # fmt: skip

    def faust() -> apps.CountRun:
        return apps.count_across_a_restart(
            bootstrap, tmp_path_factory.mktemp("faust"), "faust_app.py", "fs-words",
            "fs-counts", between_bursts="[^Worker]: Ready",
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        quix_runs = pool.submit(lambda: {g: _outcome(quix, g) for g in GUARANTEES})
        faust_run = pool.submit(_outcome, faust)
        return {**quix_runs.result(), "faust": faust_run.result()}


GUARANTEES = ("at-least-once", "exactly-once")


def _outcome(scenario: Callable[..., apps.CountRun], *args: str) -> Any:
    try:
        return scenario(*args)
    except Exception as exc:  # raised by the test that reads it
        return exc


def _run(runs: dict[str, Any], name: str) -> apps.CountRun:
    out = runs[name]
    if isinstance(out, BaseException):
        raise out
    return out


def assert_counts_restored(run: apps.CountRun) -> None:
    # The first instance answered records and stopped before the last were sent (quixstreams:
    # while they were arriving); the second answered the rest.
    assert run.answered_by_first > 0 and run.sent_at_stop < apps.TOTAL, run
    assert run.answers > run.answered_by_first, run
    assert sum(run.sent.values()) == apps.TOTAL
    # The second instance started with no local state: exact totals mean the first's counts
    # came back from the changelog (a fresh count would end short, a replay without them too).
    assert run.final == dict(run.sent), f"{run.final} != {dict(run.sent)}\n{run.logs}"


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_quixstreams_count_per_key_is_restored_from_its_changelog(
    runs: dict[str, Any], guarantee: str
) -> None:
    assert_counts_restored(_run(runs, guarantee))


def test_quixstreams_changelog_is_compacted(bootstrap: str, runs: dict[str, Any]) -> None:
    _run(runs, "at-least-once")
    kafka_io.assert_compacted(kafka_io.compact(bootstrap, QUIX_CHANGELOG))


def test_faust_table_is_restored_from_its_changelog(runs: dict[str, Any]) -> None:
    assert_counts_restored(_run(runs, "faust"))


def test_faust_table_changelog_is_compacted(bootstrap: str, runs: dict[str, Any]) -> None:
    _run(runs, "faust")
    kafka_io.assert_compacted(kafka_io.compact(bootstrap, FAUST_CHANGELOG))


def test_the_compaction_check_fails_on_a_log_keeping_every_version(tmp_path: Path) -> None:
    """The check itself, on made-up logs: every version kept is not compacted."""
    rec = kafka_io.Record
    kept_all = [rec(0, 0, b"a", b"1"), rec(0, 1, b"a", b"2"), rec(0, 2, b"b", b"1")]
    check = kafka_io.Compaction("t", before=kept_all, after=kept_all, seconds=0.0)
    with pytest.raises(AssertionError):
        kafka_io.assert_compacted(check)
    compacted = kafka_io.Compaction("t", before=kept_all, after=kept_all[1:], seconds=0.0)
    kafka_io.assert_compacted(compacted)
    wrong_value = [rec(0, 0, b"a", b"1"), rec(0, 2, b"b", b"1")]
    with pytest.raises(AssertionError):
        kafka_io.assert_compacted(kafka_io.Compaction("t", kept_all, wrong_value, 0.0))
