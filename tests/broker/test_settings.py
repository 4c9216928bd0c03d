"""Configuration: RocketMQ names in TOML, WHARF_* environment, flags winning, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wharf.broker.settings import ConfigError, camel_name, load_settings, parse_delay_levels
from wharf.store.config import StoreConfig

from tests.harness import REPO_ROOT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_documented_ones() -> None:
    config = load_settings()
    assert config.broker.listen == "127.0.0.1:8081"
    assert config.broker.metrics_listen == "127.0.0.1:9100"
    assert config.store.store_path_root_dir == "data"
    assert config.broker.auto_create_topic_enable is True
    assert config.broker.default_topic_queue_nums == 8
    assert config.broker.kafka_group_initial_rebalance_delay_ms == 3000  # Kafka's default


def test_toml_uses_rocketmq_camel_case_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'flushDiskType = "SYNC_FLUSH"\nsyncFlushTimeout = 1500\nmappedFileSizeCommitLog = '
        '65536\nautoCreateTopicEnable = false\nbrokerName = "b1"\nwarmMapedFileEnable = true\n'
        'messageDelayLevel = "1s 2s"\ncheckCRCOnRecover = false\nmaxMessageSize = 1024\n',
    )
    config = load_settings(path)
    assert config.store.flush_disk_type == "SYNC_FLUSH"
    assert config.store.sync_flush_timeout == 1500
    assert config.store.mapped_file_size_commit_log == 65536
    assert config.store.warm_mapped_file_enable is True
    assert config.store.check_crc_on_recover is False
    assert config.broker.auto_create_topic_enable is False
    assert config.broker.broker_name == "b1"


def test_kafka_groups_may_form_at_once(tmp_path: Path) -> None:
    config = load_settings(write(tmp_path, "kafkaGroupInitialRebalanceDelayMs = 0\n"))
    assert config.broker.kafka_group_initial_rebalance_delay_ms == 0
    with pytest.raises(ConfigError, match="kafkaGroupInitialRebalanceDelayMs"):
        load_settings(write(tmp_path, "kafkaGroupInitialRebalanceDelayMs = -1\n"))


def test_environment_overrides_file_and_flags_override_environment(tmp_path: Path) -> None:
    path = write(tmp_path, 'listen = "127.0.0.1:1"\nflushDiskType = "ASYNC_FLUSH"\n')
    env = {
        "WHARF_LISTEN": "127.0.0.1:2",
        "WHARF_FLUSH_DISK_TYPE": "SYNC_FLUSH",
        "WHARF_AUTO_CREATE_TOPIC_ENABLE": "off",
        "WHARF_ENDPOINTS": "ignored:1",  # the CLI's variable: not a broker setting
        "HOME": "/root",
    }
    config = load_settings(path, env, {"listen": "127.0.0.1:3"})
    assert config.broker.listen == "127.0.0.1:3"
    assert config.store.flush_disk_type == "SYNC_FLUSH"
    assert config.broker.auto_create_topic_enable is False


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('flushDiskType = "FAST"', "flushDiskType"),
        ("syncFlushTimeout = -5", "syncFlushTimeout"),
        ('syncFlushTimeout = "5"', "syncFlushTimeout"),
        ("autoCreateTopicEnable = 1", "autoCreateTopicEnable"),
        ('listen = "nowhere"', "listen"),
        ('messageDelayLevel = "1s 5x"', "messageDelayLevel"),
        ('deleteWhen = "25"', "deleteWhen"),
        ("mappedFileSizeConsumeQueue = 1001", "mappedFileSizeConsumeQueue"),
        ("defaultTopicQueueNums = 0", "defaultTopicQueueNums"),
        ("diskMaxUsedSpaceRatio = 120", "diskMaxUsedSpaceRatio"),
        ("maxMessageSize = 2000000000", "maxMessageSize"),
        ("flushDiskTyp = 1", "flushDiskTyp"),
        ('haAccessKey = "replicator"', "haAccessKey and haSecretKey go together"),
    ],
)
def test_invalid_settings_fail_naming_the_setting(tmp_path: Path, toml: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(write(tmp_path, toml + "\n"))


def test_invalid_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="WHARF_SYNC_FLUSH_TIMEOUT"):
        load_settings(None, {"WHARF_SYNC_FLUSH_TIMEOUT": "soon"})


def test_unknown_setting_suggests_the_right_spelling(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'flushDiskType'"):
        load_settings(write(tmp_path, 'flushdisktype = "SYNC_FLUSH"\n'))


def test_delay_levels_parse_units() -> None:
    assert parse_delay_levels("1s 2m 1h") == [1000, 120_000, 3_600_000]
    assert camel_name("store_path_root_dir") == "storePathRootDir"


def test_daemon_exits_2_with_the_setting_named_on_bad_config(tmp_path: Path) -> None:
    path = write(tmp_path, "maxParkedPulls = -1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "wharf.broker", "--config", str(path), "--store-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "maxParkedPulls" in proc.stderr


def test_daemon_exits_1_with_a_clear_message_when_the_port_is_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "wharf.broker", "--store-dir", str(tmp_path / "s"),
             "--listen", f"127.0.0.1:{port}", "--metrics-listen", "127.0.0.1:0"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


# Values of store settings on which the broker's loader and the store used to disagree (disk
# ratios 1..99 vs 1..100, blanks in deleteWhen, maxDispatchLagBytes 0, maxIndexNum 1): both now
# use the store's bounds, so the broker accepts exactly what MessageStore accepts.
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("disk_space_warning_level_ratio", 100),
        ("disk_space_warning_level_ratio", 101),
        ("disk_max_used_space_ratio", 95),  # above the force-clean level (85): out of order
        ("delete_when", "04; 16"),
        ("delete_when", "04;24"),
        ("max_dispatch_lag_bytes", 0),
        ("max_index_num", 1),
        ("mapped_file_size_consume_queue", 1000),
        ("mapped_file_size_consume_queue", 1010),
        ("sync_flush_timeout", 0),
        ("store_path_root_dir", " "),
    ],
)
def test_the_broker_accepts_exactly_the_store_settings_the_store_accepts(
    tmp_path: Path, setting: str, value: object
) -> None:
    config = StoreConfig(**{setting: value})  # type: ignore[arg-type]
    try:
        config.validate()
        store_error = ""
    except ValueError as exc:
        store_error = str(exc)
    key = camel_name(setting)
    toml = f"{key} = {value!r}\n".replace("'", '"')
    if store_error:
        with pytest.raises(ConfigError, match=key):
            load_settings(write(tmp_path, toml))
    else:
        assert getattr(load_settings(write(tmp_path, toml)).store, setting) == value
