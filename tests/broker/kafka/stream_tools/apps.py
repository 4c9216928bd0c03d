"""The stream-processing applications in their own venv (``.venv-streams``, ``make
stream-tools``: quixstreams pins a confluent-kafka older than the tests' own), one subprocess
each, and the scenario the Python tools share: a count per key across a restart.

The scenario: records with 8 keys go to a 2-partition source topic at a steady pace while
the first instance of the application counts them; once it has answered a quarter of them it
is stopped (SIGTERM: the tool's graceful stop) while records still arrive, its local state is
deleted, and a second instance starts: it can only count on from where the first stopped by
restoring its state from the changelog topic. The counts topic's last value per key must be
the exact number of records sent with that key.

``between_bursts`` (faust): half the records, all answered by the first instance, which then
stops; the other half once the second instance says it is ready. faust-streaming 0.15.3 skips
one record and repeats another per partition when its new worker starts with records waiting
(against Apache Kafka 4.4.0 too, 1 run in 4: counts 59 and 61 for 60), so a stop mid-stream
would test faust's luck, not the broker."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.broker.kafka.stream_tools import kafka_io
from tests.harness import REPO_ROOT, Daemons

HERE = Path(__file__).resolve().parent
STREAMS_PYTHON = REPO_ROOT / ".venv-streams" / "bin" / "python"
# A broker of the user's choosing instead of a Wharf daemon (a fresh Apache Kafka, to check
# the applications and drivers themselves): its host:port.
EXTERNAL_ENV = "WHARF_STREAM_TOOLS_BOOTSTRAP"

WORDS = [f"w{i}" for i in range(8)]
TOTAL = 480  # records sent, 60 a key
WARM_UP = 40  # sent at once, before the first instance answers
PACE_S = 0.02  # between two of the others: ~9 s of records, so the restart falls mid-stream


def external_bootstrap() -> str | None:
    return os.environ.get(EXTERNAL_ENV) or None


def streams_python() -> str:
    if not STREAMS_PYTHON.exists():
        pytest.skip("the stream tools' venv is missing: run `make stream-tools`")
    return str(STREAMS_PYTHON)


class App:
    """One instance of an application script, its output in ``log_path``."""

    def __init__(
        self, script: str, bootstrap: str, data_dir: Path, log_path: Path, *args: str
    ) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [streams_python(), str(HERE / script), bootstrap, str(data_dir), *args],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, its graceful stop; SIGKILL after ``timeout`` (an AssertionError then)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"not stopped {timeout} s after SIGTERM\n{self.tail()}") from None

    def tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


@dataclass
class CountRun:
    sent: Counter[str] = field(default_factory=Counter)  # records sent per key
    answered_by_first: int = 0  # counts the first instance wrote before its stop
    sent_at_stop: int = 0  # records sent when the first instance was stopped
    final: dict[str, int] = field(default_factory=dict)  # the counts topic's last count per key
    answers: int = 0  # records in the counts topic
    logs: str = ""


def _counts(bootstrap: str, topic: str) -> tuple[int, dict[str, int]]:
    records = kafka_io.read_log(bootstrap, topic)
    last = kafka_io.latest(records)
    return len(records), {
        k.decode(): json.loads(v)["count"] for k, v in last.items() if k is not None and v
    }


def _topic_exists(bootstrap: str, topic: str) -> bool:
    client = kafka_io.admin(bootstrap)
    meta = client.list_topics(timeout=10).topics
    return topic in meta and meta[topic].error is None


def _wait_for_line(app: App, line: str, deadline: float) -> None:
    while line not in app.tail(1 << 20):
        assert time.monotonic() < deadline, f"not seen: {line!r}\n{app.tail()}"
        assert app.proc.poll() is None, f"exited\n{app.tail()}"
        time.sleep(0.3)


def count_across_a_restart(
    bootstrap: str,
    root: Path,
    script: str,
    source: str,
    counts: str,
    timeout: float = 90.0,
    between_bursts: str | None = None,
    args: tuple[str, ...] = (),
) -> CountRun:
    """The scenario of the module doc; ``root`` holds the instances' data and logs;
    ``between_bursts``: the line the application logs once ready; ``args``: the
    application's own, after its data directory."""
    run = CountRun()
    kafka_io.create_topic(bootstrap, source, 2)
    out = kafka_io.producer(bootstrap)
    stop_sending = threading.Event()
    sent = [0]

    def send(first: int, last: int, pace: float) -> None:
        for i in range(first, last):
            if stop_sending.is_set():
                return
            word = WORDS[i % len(WORDS)]
            out.produce(source, key=word, value=json.dumps({"i": i}))
            out.poll(0)
            run.sent[word] += 1
            sent[0] = i + 1
            time.sleep(pace)
        out.flush(20)

    deadline = time.monotonic() + timeout
    logs = [root / "first.log", root / "second.log"]
    first = App(script, bootstrap, root / "first", logs[0], *args)
    second = None
    # A first burst; the paced rest once the first instance answers (its start-up, a group
    # join included, takes seconds): the stop below falls while records still arrive.
    first_part = TOTAL // 2 if between_bursts else WARM_UP
    send(0, first_part, 0.0)
    sender = threading.Thread(target=send, args=(first_part, TOTAL, PACE_S), daemon=True)
    try:
        while run.answered_by_first < (first_part if between_bursts else TOTAL // 4):
            assert time.monotonic() < deadline, (
                f"the first instance answered too few\n{first.tail()}"
            )
            assert first.proc.poll() is None, f"the first instance exited\n{first.tail()}"
            time.sleep(0.3)
            if _topic_exists(bootstrap, counts):
                run.answered_by_first, _ = _counts(bootstrap, counts)
            starts = not between_bursts and run.answered_by_first and sent[0] == WARM_UP
            if starts and not sender.is_alive():
                sender.start()
        run.sent_at_stop = sent[0]
        assert first.stop() == 0, first.tail()
        shutil.rmtree(root / "first", ignore_errors=True)  # the local state: gone
        run.answered_by_first, _ = _counts(bootstrap, counts)
        second = App(script, bootstrap, root / "second", logs[1], *args)
        if between_bursts:
            _wait_for_line(second, between_bursts, deadline)
            sender.start()
        sender.join(timeout)
        out.flush(20)
        # Done when the counts are final and the second instance has answered records too.
        while run.final != dict(run.sent) or run.answers <= run.answered_by_first:
            if time.monotonic() > deadline:
                break
            assert second.proc.poll() is None, f"the second instance exited\n{second.tail()}"
            time.sleep(1.0)
            run.answers, run.final = _counts(bootstrap, counts)
        assert second.stop() == 0, second.tail()
    finally:
        stop_sending.set()
        for app in (first, second):
            if app is not None and app.proc.poll() is None:
                app.proc.kill()
                app.proc.wait()
        run.logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists()
        )
    return run


def tools_bootstrap(daemons: Daemons) -> str:
    """The broker the tool tests share (module scope): ``EXTERNAL_ENV``'s, else a Wharf daemon
    with a Kafka listener."""
    external = external_bootstrap()
    if external is not None:
        return external
    broker = daemons.broker(
        "stream-tools",
        # Compacted queues looked at every second (15 s by default, as Kafka's
        # log.cleaner.backoff.ms): the compaction checks wait seconds, not tens.
        # Groups form at once (Kafka's docs advise a 0 initial rebalance delay in tests; 3 s by
        # default): each tool forms its groups from empty twice, Connect two of them.
        settings={"compactionCheckInterval": 1000, "kafkaGroupInitialRebalanceDelayMs": 0},
        extra_args=["--kafka-listen", "127.0.0.1:0"],
    )
    return broker.kafka_endpoint
