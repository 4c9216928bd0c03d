"""Bad options fail at planning with a message naming the option."""

from __future__ import annotations

import pytest
from wharf.client.spark.options import OptionError, parse_read_options, parse_write_options

pytestmark = pytest.mark.spark

BASE = {"endpoints": "127.0.0.1:8081", "topic": "orders"}


def test_kafka_like_defaults_differ_for_batch_and_streaming() -> None:
    batch = parse_read_options(BASE, streaming=False)
    stream = parse_read_options(BASE, streaming=True)
    assert batch.starting.default == -2 and stream.starting.default == -1
    assert batch.fail_on_data_loss and not batch.include_properties
    assert batch.pull_batch_size == 1024


def test_option_names_are_case_insensitive() -> None:
    opts = parse_read_options({**BASE, "MAXOFFSETSPERTRIGGER": "7"}, streaming=True)
    assert opts.max_offsets_per_trigger == 7


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"endpoints": ""}, "'endpoints' is required"),
        ({"endpoints": "localhost"}, "not host:port"),
        ({"topic": "bad topic"}, "not a valid topic name"),
        ({"startingOffsets": "{nope"}, "'startingOffsets' must be"),
        ({"startingOffsets": '{"orders": {"x": 1}}'}, "queue id 'x'"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "not allowed"),
        ({"minPartitions": "0"}, "'minPartitions' must be a positive integer"),
        ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
        ({"maxOffsetsPerTrigger": "10"}, "streaming reads only"),
        ({"startingTimestamp": "yesterday"}, "milliseconds"),
    ],
)
def test_bad_read_options_are_named(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({**BASE, **extra}, streaming=False)


def test_write_options_validate_writer_id_and_batch_size() -> None:
    assert parse_write_options(BASE).batch_size == 256
    with pytest.raises(OptionError, match="writerId"):
        parse_write_options({**BASE, "writerId": "has space"})
    with pytest.raises(OptionError, match="batchSize"):
        parse_write_options({**BASE, "batchSize": "-1"})
