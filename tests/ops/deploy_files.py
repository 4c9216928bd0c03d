"""Readers for the files under deploy/ (shared by the deploy and end-to-end ops tests)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from tests.harness import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "wharf.json"
# Series names a dashboard or rule may use: the broker's own families (Prometheus adds `up`).
METRIC_NAME = re.compile(r"\b(?:rocketmq|wharf)_[a-zA-Z0-9_]+\b")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    if pending:
        raise ValueError(f"{path}: dangling line continuation")
    return instructions


def exec_form(args: str) -> list[str]:
    """A JSON exec-form argument list, or the shell form split into words."""
    return json.loads(args) if args.startswith("[") else shlex.split(args)


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries: list[str] = []
    for panel in dashboard["panels"]:
        queries.extend(target["expr"] for target in panel.get("targets", []))
    return queries


def metric_names_in(query: str) -> set[str]:
    return set(METRIC_NAME.findall(query))


def runnable_query(query: str) -> str:
    """Replace Grafana's variables so Prometheus can evaluate the query."""
    return query.replace("$__rate_interval", "1m").replace("$instance", ".*")
