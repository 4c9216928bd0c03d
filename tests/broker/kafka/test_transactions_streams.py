"""A stream processor's exactly-once on Wharf: a quixstreams application with
``processing_guarantee="exactly-once"`` (confluent-kafka transactions with
send_offsets_to_transaction at each checkpoint) copying a topic, SIGKILLed mid-stream and
started again: a read_committed reader of its output sees every input exactly once (the
killed instance's open transaction aborted by the new one's fencing init, its input offsets
not committed, so the new one redoes exactly that part)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.broker.kafka.stream_tools.apps import streams_python
from tests.broker.kafka.test_transactions import _read_all, _topics
from tests.harness import Daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
APP = Path(__file__).parent / "clients" / "quix_eos_app.py"
RECORDS = 400


def _start(bootstrap: str, state: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([streams_python(), str(APP), bootstrap, str(state)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _committed_out(bootstrap: str, expect: int | None = None, wait_s: float = 2.0) -> list[bytes]:
    return [v for _, _, v in _read_all(bootstrap, "eos-out", "read_committed", expect, wait_s, 1)]


def test_quixstreams_exactly_once_across_a_kill_9(daemons: Daemons, tmp_path: Path) -> None:
    python = streams_python()  # skips without the venv
    assert python
    broker = daemons.broker(
        tmp_path / "broker", extra_args=["--kafka-listen", "127.0.0.1:0"],
        settings={"kafkaGroupInitialRebalanceDelayMs": 0},
    )  # fmt: skip
    bootstrap = broker.kafka_endpoint
    _topics(bootstrap, "eos-in", "eos-out", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    wanted = [f"r{i:04d}".encode() for i in range(RECORDS)]
    log = tmp_path / "app.log"
    app = _start(bootstrap, tmp_path / "state", log)
    try:
        for i, value in enumerate(wanted):
            producer.produce("eos-in", value, partition=0)
            if i % 20 == 19:
                producer.flush(10)
                time.sleep(0.05)  # ~8 s of input: the kill falls mid-stream
            if i == RECORDS // 2:
                deadline = time.monotonic() + 60
                while not _committed_out(bootstrap, 1, 0.5) and time.monotonic() < deadline:
                    pass  # the application is up and committing
                os.killpg(app.pid, signal.SIGKILL)  # mid-transaction
                app.wait(10)
                app = _start(bootstrap, tmp_path / "state", log)
        producer.flush(10)
        got = _committed_out(bootstrap, RECORDS, wait_s=90)
    finally:
        os.killpg(app.pid, signal.SIGTERM)
        app.wait(20)
    assert len(got) == RECORDS, (len(got), log.read_text()[-3000:])
    assert sorted(got) == sorted(v.upper() for v in wanted)  # each exactly once
