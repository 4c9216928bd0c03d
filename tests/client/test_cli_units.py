"""The `wharf` CLI without a broker: options, environment, timestamps, exit codes, JSON output."""

from __future__ import annotations

import grpc
import pytest
from wharf.client.errors import (
    error_for_status,
)


# ---------------------------------------------------------------- CLI parsing
def test_cli_parses_global_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from wharf.client.cli.main import build_parser

    monkeypatch.setenv("WHARF_ENDPOINTS", "10.0.0.1:9000")
    args = build_parser().parse_args(["--json", "send", "t", "body", "--key", "a", "--key", "b"])
    assert args.endpoints == "10.0.0.1:9000" and args.json and args.keys == ["a", "b"]
    args = build_parser().parse_args(["--endpoints", "h:1", "bench", "produce", "--tasks", "3"])
    assert (args.endpoints, args.workload, args.tasks, args.batch) == ("h:1", "produce", 3, 1)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["topic", "create"])  # NAME missing
    assert exit_info.value.code == 2


def test_cli_timestamps_and_attributes() -> None:
    from wharf.client.cli.group_commands import parse_timestamp
    from wharf.client.cli.topic_commands import parse_attributes

    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # naive = UTC
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_timestamp("yesterday")
    assert parse_attributes(["a=1", "b="]) == {"a": "1", "b": ""}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_attributes(["novalue"])


def test_cli_topic_create_takes_kafka_configs() -> None:
    from wharf.client.cli.main import build_parser
    from wharf.client.cli.topic_commands import topic_attributes

    args = build_parser().parse_args(
        ["topic", "create", "t", "--config", "cleanup.policy=compact", "--attr", "segment.ms=1"]
    )
    assert topic_attributes(args) == {"cleanup.policy": "compact", "segment.ms": "1"}


def test_cli_exit_codes_follow_the_error_kind() -> None:
    from wharf.client.cli.exit_codes import exit_code_for

    assert exit_code_for(error_for_status(grpc.StatusCode.UNAVAILABLE, "")) == 3
    assert exit_code_for(error_for_status(grpc.StatusCode.DEADLINE_EXCEEDED, "")) == 3
    assert exit_code_for(error_for_status(grpc.StatusCode.NOT_FOUND, "")) == 4
    assert exit_code_for(error_for_status(grpc.StatusCode.ALREADY_EXISTS, "")) == 5
    assert exit_code_for(error_for_status(grpc.StatusCode.INVALID_ARGUMENT, "")) == 1


def test_cli_json_keeps_strings_strings_and_int64_numbers() -> None:
    from wharf.client.cli.output import proto_dict
    from wharf.v1 import admin_pb2

    topic = proto_dict(admin_pb2.TopicConfig(name="123", read_queue_nums=3, attributes={"a": "1"}))
    assert topic == {
        "name": "123",
        "read_queue_nums": 3,
        "write_queue_nums": 0,
        "perm": 0,
        "attributes": {"a": "1"},
    }
    status = proto_dict(admin_pb2.BrokerStatus(uptime_ms=2**40))
    assert status["uptime_ms"] == 2**40 and status["runtime"] == {}
    group = proto_dict(admin_pb2.SubscriptionGroupConfig(consume_from_where=2))
    assert group["consume_from_where"] == "CONSUME_FROM_FIRST_OFFSET"
    assert proto_dict(admin_pb2.ResetConsumerOffsetResponse(offsets={1: 5})) == {
        "offsets": {"1": 5}
    }
