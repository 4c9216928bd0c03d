"""The ``wharf`` CLI run as a subprocess against the real daemon: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.harness import REPO_ROOT, BrokerProcess, free_port


def wharf(
    endpoint: str, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "wharf.client.cli.main",
        *(["--endpoints", endpoint] if endpoint else []),
        *args,
    ]
    return subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # fmt: skip


def json_lines(proc: subprocess.CompletedProcess[str]) -> list:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_topic_lifecycle_with_tables_json_and_exit_codes(broker: BrokerProcess, name: str) -> None:
    ep = broker.endpoint
    created = wharf(ep, "topic", "create", name, "--queues", "3", "--attr", "message.type=NORMAL")
    assert created.returncode == 0, created.stderr
    assert f"topic {name} created" in created.stdout and "read_queues=3" in created.stdout

    again = wharf(ep, "topic", "create", name)
    assert again.returncode == 5 and "ALREADY_EXISTS" in again.stderr

    updated = wharf(ep, "--json", "topic", "update", name, "--write-queues", "2")
    assert updated.returncode == 0
    assert json_lines(updated)[0]["write_queue_nums"] == 2

    listed = wharf(ep, "--json", "topic", "list")
    topics = {t["name"]: t for t in json_lines(listed)[0]}
    assert topics[name]["read_queue_nums"] == 3
    assert name in wharf(ep, "topic", "list").stdout  # rich table

    status = wharf(ep, "--json", "topic", "status", name)
    assert [q["queue_id"] for q in json_lines(status)[0]["queues"]] == [0, 1, 2]

    deleted = wharf(ep, "topic", "delete", name)
    assert deleted.returncode == 0
    missing = wharf(ep, "--json", "topic", "status", name)
    assert missing.returncode == 4
    assert json.loads(missing.stderr)["error"]["code"] == "NOT_FOUND"


def test_send_consume_query_view_round_trip(broker: BrokerProcess, name: str) -> None:
    ep = broker.endpoint
    one = wharf(
        ep, "--json", "send", name, "hello", "--tags", "greet", "--key", "k-1", "--prop", "a=b"
    )
    assert one.returncode == 0, one.stderr
    sent = json_lines(one)[0]
    assert sent["status"] == "SEND_OK" and len(sent["msg_id"]) == 32

    many = wharf(ep, "--json", "send", name, stdin="l1\nl2\n\nl3\n")
    assert many.returncode == 0
    assert len(json_lines(many)) == 3  # blank lines are skipped

    consumed = wharf(ep, "--json", "consume", name)
    messages = json_lines(consumed)
    assert sorted(m["body"] for m in messages) == ["hello", "l1", "l2", "l3"]
    hello = next(m for m in messages if m["body"] == "hello")
    assert hello["tags"] == "greet" and hello["keys"] == ["k-1"] and hello["properties"]["a"] == "b"

    limited = wharf(ep, "--json", "consume", name, "--tags", "greet", "--max", "5")
    assert [m["body"] for m in json_lines(limited)] == ["hello"]

    text = wharf(ep, "consume", name, "--max", "1")
    assert text.returncode == 0 and name in text.stdout

    queried = wharf(ep, "--json", "query", "--topic", name, "--key", "k-1")
    assert [m["msg_id"] for m in json_lines(queried)[0]] == [sent["msg_id"]]

    viewed = wharf(ep, "--json", "view", "--msg-id", sent["offset_msg_id"])
    assert json_lines(viewed)[0]["body"] == "hello"
    table = wharf(ep, "view", "--msg-id", sent["msg_id"], "--topic", name)
    assert table.returncode == 0 and "hello" in table.stdout


def test_send_file_and_follow_consume(broker: BrokerProcess, name: str, tmp_path) -> None:
    ep = broker.endpoint
    payload = tmp_path / "payload.txt"
    payload.write_text("from a file " * 1000)  # 12 KB: compressed on the wire
    assert wharf(ep, "send", name, "--file", str(payload)).returncode == 0
    follow = subprocess.Popen(
        [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", ep, "--json", "consume", name,
         "--follow", "--max", "2"],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        assert wharf(ep, "send", name, "later").returncode == 0
        out, _ = follow.communicate(timeout=30)
    finally:
        follow.kill()
    bodies = [json.loads(line)["body"] for line in out.splitlines()]
    assert bodies == [payload.read_text(), "later"]
    assert follow.returncode == 0


def test_group_progress_and_offset_reset(broker: BrokerProcess, name: str) -> None:
    ep = broker.endpoint
    assert wharf(ep, "topic", "create", name, "--queues", "1").returncode == 0
    created = wharf(
        ep, "--json", "group", "create", name, "--retry-max-times", "3", "--from", "FIRST"
    )
    assert created.returncode == 0 and json_lines(created)[0]["retry_max_times"] == 3
    assert name in {g["group_name"] for g in json_lines(wharf(ep, "--json", "group", "list"))[0]}
    wharf(ep, "send", name, stdin="a\nb\nc\n")
    consumed = wharf(ep, "--json", "consume", name, "--group", name, "--commit", "--max", "2")
    assert len(json_lines(consumed)) == 2

    progress = json_lines(wharf(ep, "--json", "group", "progress", name, "--topic", name))[0]
    queue = progress["queues"][0]
    assert (queue["broker_offset"], queue["consumer_offset"], queue["lag"]) == (3, 2, 1)
    assert "lag" in wharf(ep, "group", "progress", name).stdout

    reset = wharf(
        ep, "--json", "offsets", "reset", "--group", name, "--topic", name, "--timestamp", "0"
    )
    assert reset.returncode == 0 and json_lines(reset)[0]["offsets"] == {"0": 0}
    again = json_lines(wharf(ep, "--json", "group", "progress", name, "--topic", name))[0]
    assert again["total_lag"] == 3

    disabled = wharf(ep, "--json", "group", "create", name, "--disable")
    assert disabled.returncode == 0 and json_lines(disabled)[0]["consume_enable"] is False
    refused = wharf(ep, "consume", name, "--group", name, "--max", "1")
    assert refused.returncode != 0 and "consume_enable" in refused.stderr
    enabled = wharf(ep, "group", "create", name, "--enable")
    assert enabled.returncode == 0 and "consume=enabled" in enabled.stdout
    assert len(json_lines(wharf(ep, "--json", "consume", name, "--group", name, "--max", "1"))) == 1

    assert wharf(ep, "group", "delete", name).returncode == 0
    assert name not in {
        g["group_name"] for g in json_lines(wharf(ep, "--json", "group", "list"))[0]
    }


def test_broker_status_and_endpoint_from_environment(broker: BrokerProcess) -> None:
    status = wharf("", "--json", "broker", "status", env={"WHARF_ENDPOINTS": broker.endpoint})
    assert status.returncode == 0
    data = json_lines(status)[0]
    assert data["flush_disk_type"] in ("ASYNC_FLUSH", "SYNC_FLUSH") and data["writable"] is True
    assert "flush_disk_type" in wharf(broker.endpoint, "broker", "status").stdout


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["topic"], 2, "ACTION"),
        (["send", "t", "body", "--file", "/nonexistent"], 2, "not both"),
        (
            ["offsets", "reset", "--group", "g", "--topic", "t", "--timestamp", "yesterday"],
            2,
            "ISO 8601",
        ),
        # The producer encodes records itself, so it checks the topic name before sending.
        (["send", "bad topic!", "x"], 2, "is invalid"),
        (["topic", "create", "bad topic!"], 1, "INVALID_ARGUMENT"),
    ],
)
def test_usage_and_broker_errors_have_documented_exit_codes(
    broker: BrokerProcess, args: list[str], code: int, text: str
) -> None:
    proc = wharf(broker.endpoint, *args)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr


def test_unreachable_broker_exits_3() -> None:
    proc = wharf(f"127.0.0.1:{free_port()}", "--json", "topic", "list")
    assert proc.returncode == 3
    assert json.loads(proc.stderr)["error"]["code"] == "UNAVAILABLE"
    bad = wharf("nonsense", "topic", "list")
    assert bad.returncode == 2 and "host:port" in bad.stderr


def test_bench_produce_and_consume_print_figures(broker: BrokerProcess, name: str) -> None:
    produced = wharf(broker.endpoint, "--json", "bench", "produce", "--topic", name,
                     "--count", "2000", "--tasks", "16", "--size", "256", "--interval", "0.2")  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    final = json_lines(produced)[-1]
    assert final["result"]["messages"] == 2000 and final["result"]["msgs_per_s"] > 0
    assert final["result"]["p99_ms"] >= final["result"]["p50_ms"] > 0
    consumed = wharf(broker.endpoint, "bench", "consume", "--topic", name, "--batch", "100")
    assert consumed.returncode == 0
    summary = json.loads(consumed.stdout.splitlines()[-1])
    assert summary["result"]["messages"] == 2000
    assert "msgs_per_s" in consumed.stdout  # the table's header
