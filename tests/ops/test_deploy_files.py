"""deploy/ without a Docker engine: structure and cross-references of the compose file,
Dockerfile, broker.toml, Prometheus, alert rules and Grafana provisioning."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from wharf.broker.metrics import BrokerMetrics
from wharf.broker.settings import load_settings

from tests.harness import REPO_ROOT
from tests.ops.deploy_files import (
    DASHBOARD,
    DEPLOY,
    dashboard_queries,
    dockerfile_instructions,
    exec_form,
    load_yaml,
    metric_names_in,
)
from tests.ops.exposition import sample_names
from tests.ops.fakes import fake_controller

COMPOSE = load_yaml(DEPLOY / "docker-compose.yml")
DOCKERFILE = dockerfile_instructions(DEPLOY / "Dockerfile")


def compose_mounts(service: str) -> dict[str, str]:
    """container path -> host source for the service's volumes (bind and named)."""
    mounts = {}
    for entry in COMPOSE["services"][service].get("volumes", []):
        source, target, *_ = entry.split(":")
        mounts[target] = source
    return mounts


def test_compose_defines_broker_prometheus_and_grafana_with_declared_volumes() -> None:
    services = COMPOSE["services"]
    assert set(services) == {"broker", "prometheus", "grafana", "console"}
    named = set(COMPOSE["volumes"])
    for name in services:
        for source in compose_mounts(name).values():
            if not source.startswith("."):
                assert source in named, f"{name}: volume {source} is not declared"
    assert services["prometheus"]["depends_on"]["broker"]["condition"] == "service_healthy"


def test_every_file_the_compose_mounts_exists() -> None:
    for name in COMPOSE["services"]:
        for target, source in compose_mounts(name).items():
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source} at {target}"


def test_broker_service_builds_this_repo_publishes_ports_and_mounts_its_config() -> None:
    broker = COMPOSE["services"]["broker"]
    context = (DEPLOY / broker["build"]["context"]).resolve()
    assert context == REPO_ROOT.resolve()
    assert (context / broker["build"]["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
    assert set(broker["ports"]) == {"8081:8081", "8083:8083", "9100:9100"}  # gRPC, wire, metrics
    config_path = broker["command"][broker["command"].index("--config") + 1]
    assert compose_mounts("broker")[config_path] == "./broker.toml"
    assert compose_mounts("broker")["/var/lib/wharf"] == "wharf-data"
    assert "WHARF_ADVERTISED_ADDRESS" in broker["environment"]


def test_dockerfile_copies_existing_sources_runs_as_non_root_with_a_probe_healthcheck() -> None:
    keywords = [keyword for keyword, _ in DOCKERFILE]
    assert keywords[: keywords.index("FROM")] == ["ARG", "ARG"]  # the bases, as build arguments
    assert keywords.count("HEALTHCHECK") == 1
    args = dict(a.split("=", 1) for keyword, a in DOCKERFILE[:2])
    # Default: the official image for users with a registry; `make image` passes Debian-made ones.
    assert args["PYTHON_IMAGE"].startswith("python:") and args["PYTHON_IMAGE"].endswith("-slim")
    assert args["BUILD_IMAGE"] == "${PYTHON_IMAGE}"
    bases = [a.split()[0] for keyword, a in DOCKERFILE if keyword == "FROM"]
    assert bases == ["${BUILD_IMAGE}", "${PYTHON_IMAGE}"]
    # No `# syntax=` line: BuildKit would pull a frontend image, which fails with no registry.
    assert not (DEPLOY / "Dockerfile").read_text().startswith("# syntax")
    # One .dockerignore for every builder (the legacy one ignores <Dockerfile>.dockerignore).
    assert not (DEPLOY / "Dockerfile.dockerignore").exists()
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "**" in ignore and not any(line.startswith("!deploy/secrets") for line in ignore)
    for keyword, args_ in DOCKERFILE:
        if keyword == "COPY" and not args_.startswith("--from"):
            *sources, _dest = args_.split()
            for source in sources:
                pattern = source.rstrip("*")
                if pattern == source:  # a glob (the optional wheelhouse) may match nothing
                    assert (REPO_ROOT / source).exists(), f"COPY source {source} does not exist"
                assert any(line.startswith(f"!{pattern}") for line in ignore), (
                    f"{source} is excluded from the build context by .dockerignore"
                )
    users = [args for keyword, args in DOCKERFILE if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    healthcheck = next(args for keyword, args in DOCKERFILE if keyword == "HEALTHCHECK")
    command = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert command[0] == "wharf-probe" and "--endpoint" not in command
    env = dict(
        pair.split("=", 1)
        for keyword, args in DOCKERFILE
        if keyword == "ENV"
        for pair in shlex.split(args)
    )
    assert env["PYTHONUNBUFFERED"] == "1"  # logs reach `docker logs` at once
    # The probe dials the port broker.toml listens on (loopback inside the container).
    listen_port = load_settings(DEPLOY / "broker.toml").broker.listen.rpartition(":")[2]
    assert env["WHARF_PROBE_ENDPOINT"] == f"127.0.0.1:{listen_port}"
    entrypoint = exec_form(next(args for keyword, args in DOCKERFILE if keyword == "ENTRYPOINT"))
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint[0] in scripts and "wharf-probe" in scripts
    volumes = exec_form(next(args for keyword, args in DOCKERFILE if keyword == "VOLUME"))
    assert volumes == ["/var/lib/wharf"]
    exposed = next(args for keyword, args in DOCKERFILE if keyword == "EXPOSE").split()
    assert exposed == ["8081", "8083", "9100"]


def test_broker_toml_loads_with_the_broker_config_loader_and_matches_the_container() -> None:
    config = load_settings(
        DEPLOY / "broker.toml", env={"WHARF_ADVERTISED_ADDRESS": "mq.example.com:8081"}
    )
    assert config.broker.listen == "0.0.0.0:8081"
    assert config.broker.metrics_listen == "0.0.0.0:9100"
    assert config.broker.advertised_address == "mq.example.com:8081"  # compose env wins
    assert config.store.store_path_root_dir.startswith("/var/lib/wharf/")  # on the volume
    defaults = load_settings(DEPLOY / "broker.toml")
    assert defaults.broker.advertised_address == "localhost:8081"


def test_prometheus_scrapes_the_broker_service_and_loads_the_mounted_rules() -> None:
    prometheus = load_yaml(DEPLOY / "prometheus.yml")
    mounts = compose_mounts("prometheus")
    for rule_file in prometheus["rule_files"]:
        assert mounts[rule_file] == "./alerts.yml"
    (job,) = prometheus["scrape_configs"]
    assert job["job_name"] == "wharf"
    assert job["static_configs"][0]["targets"] == ["broker:9100"]


def test_compose_turns_tls_and_the_metrics_token_on_with_files_passed_as_secrets() -> None:
    broker = COMPOSE["services"]["broker"]
    env = {name: str(value) for name, value in broker["environment"].items()}
    env.pop("WHARF_ADVERTISED_ADDRESS")  # ${...:-default}: compose interpolates it
    secret_files = {name: spec["file"] for name, spec in COMPOSE["secrets"].items()}
    config = load_settings(DEPLOY / "broker.toml", env=env).broker
    assert config.tls_enable and not config.tls_listen  # the published 8081 is TLS-only
    assert config.tls_client_auth == "none"
    paths = {
        "tlsCertPath": config.tls_cert_path,
        "tlsKeyPath": config.tls_key_path,
        "metricsBearerTokenFile": config.metrics_bearer_token_file,
        "probe CA": env["WHARF_PROBE_CA_FILE"],
    }
    for what, path in paths.items():
        name = path.removeprefix("/run/secrets/")
        assert path.startswith("/run/secrets/") and name in broker["secrets"], what
        assert secret_files[name].startswith("./secrets/"), what
    assert env["WHARF_PROBE_CA_FILE"] == config.tls_cert_path
    # Prometheus sends the same token, read from the same secret mounted in its container.
    (job,) = load_yaml(DEPLOY / "prometheus.yml")["scrape_configs"]
    token_path = job["authorization"]["credentials_file"]
    assert job["authorization"]["type"] == "Bearer"
    assert token_path == config.metrics_bearer_token_file
    assert token_path.removeprefix("/run/secrets/") in COMPOSE["services"]["prometheus"]["secrets"]
    # Nothing secret is inline, and the secret files never reach git or the image.
    lines = (DEPLOY / "docker-compose.yml").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    assert "BEGIN" not in text and "TOKEN:" not in text
    assert not re.search(r"Bearer [A-Za-z0-9_-]{16}", text)  # the console's probe reads a file
    ignored = (DEPLOY / "secrets" / ".gitignore").read_text().splitlines()
    assert "*" in ignored and {f"!{n}" for n in (".gitignore", "README.md")} <= set(ignored)
    assert not any(
        "secrets" in line
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    )


def test_grafana_provisioning_points_at_the_mounted_dashboards_and_datasource_uid() -> None:
    mounts = compose_mounts("grafana")
    provisioning = DEPLOY / "grafana" / "provisioning"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    providers = load_yaml(provisioning / "dashboards" / "wharf.yml")["providers"]
    assert mounts[providers[0]["options"]["path"]] == "./grafana/dashboards"
    (datasource,) = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {panel["datasource"]["uid"] for panel in dashboard["panels"] if "datasource" in panel}
    assert uids == {datasource["uid"]}


def test_dashboard_json_panels_are_well_formed_and_cover_the_operator_views() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    covered: dict[tuple[int, int], str] = {}  # Grafana's 24-column grid: no overlaps
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in covered, f"{panel['title']} overlaps {covered[(x, y)]}"
                covered[(x, y)] = panel["title"]
    queries = dashboard_queries(dashboard)
    assert all(metric_names_in(query) for query in queries), "a query names no broker metric"
    used = set().union(*(metric_names_in(query) for query in queries))
    for needed in (
        "rocketmq_messages_in_total",
        "rocketmq_messages_out_total",
        "rocketmq_rpc_latency_bucket",
        "rocketmq_consumer_lag_messages",
        "wharf_store_flush_latency_seconds_bucket",
        "wharf_store_dispatch_behind_bytes",
        "wharf_store_disk_used_ratio",
    ):
        assert needed in used, f"dashboard does not show {needed}"


def test_every_metric_the_dashboard_and_alerts_use_is_exported_by_broker_metrics() -> None:
    metrics = BrokerMetrics()
    metrics.attach(fake_controller().view())
    metrics.on_messages_in("orders", [10])
    metrics.observe_rpc("SendMessage", "OK", 0.001)
    exported = sample_names(metrics.render().decode())
    used = set().union(
        *(metric_names_in(q) for q in dashboard_queries(json.loads(DASHBOARD.read_text())))
    )
    used |= metric_names_in((DEPLOY / "alerts.yml").read_text())
    # Histogram series (_bucket/_sum/_count) exist once observed; family names once typed.
    assert used <= exported, f"not exported: {sorted(used - exported)}"


@pytest.mark.ops
def test_promtool_accepts_the_alert_rules_and_their_unit_tests() -> None:
    checked = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "alerts.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        cwd=Path(__file__).parent, capture_output=True, text=True,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.ops
def test_promtool_accepts_the_prometheus_config(tmp_path: Path) -> None:
    # The rule path is the container's: rebase it onto the repo file for promtool.
    prometheus = load_yaml(DEPLOY / "prometheus.yml")
    prometheus["rule_files"] = [str(DEPLOY / "alerts.yml")]
    # So is the metrics token's (a compose secret): promtool wants the file to exist.
    token = tmp_path / "metrics_token"
    token.write_text("token\n")
    prometheus["scrape_configs"][0]["authorization"]["credentials_file"] = str(token)
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps(prometheus))
    result = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_image_wheel_ships_the_broker_probe_and_generated_stubs(tmp_path: Path) -> None:
    """What the Dockerfile's build stage does: a wheel from exactly the COPY'd paths."""
    source = tmp_path / "src"
    stages = [i for i, (k, _) in enumerate(DOCKERFILE) if k == "FROM"]
    for keyword, args in DOCKERFILE[stages[0] : stages[1]]:
        # The build's sources: what is copied into its WORKDIR (the wheelhouse goes elsewhere).
        if keyword == "COPY" and not args.split()[-1].startswith("/"):
            for name in args.split()[:-1]:
                origin = REPO_ROOT / name
                if origin.is_dir():
                    shutil.copytree(
                        origin, source / name, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    source.mkdir(exist_ok=True)
                    shutil.copy(origin, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "wheels").glob("wharf-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "wharf/broker/kit/probe.py",
        "wharf/broker/metrics/__init__.py",
        "wharf/v1/messaging_pb2.py",
    } <= names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert (
        "wharf-probe = wharf.broker.kit.probe:main" in text
        and "wharf-broker = wharf.broker.__main__:main" in text
    )
