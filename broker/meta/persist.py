"""Atomic JSON files for the broker's metadata under ``<store>/config/`` (as RocketMQ's
ConfigManager): written by ``wharf.store.paths.write_text_atomic_blocking`` (tmp + fsync, the
previous file kept as ``name.bak``, rename over, directory synced).
Load falls back to ``.bak`` when the main file is missing or unreadable (torn by a crash before
the rename cannot happen, but a disk error or a hand edit can).

Blocking functions are named ``*_blocking`` and run through a thread.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

# One crash-safe writer for every metadata file, shared with the store (delayOffset.json).
from wharf.store.paths import backup_of, write_text_atomic_blocking

__all__ = ["MetadataError", "dumps", "load_json_blocking", "write_text_atomic_blocking"]

log = logging.getLogger(__name__)


class MetadataError(RuntimeError):
    """A metadata file exists but neither it nor its backup can be read: refuse to start
    rather than silently forget topics or consumer offsets."""


def load_json_blocking(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (or its ``.bak``); None when neither exists."""
    seen = False
    for candidate in (path, backup_of(path)):
        if not candidate.exists():
            continue
        seen = True
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.error("cannot read %s (%s); trying the backup", candidate, exc)
            continue
        if isinstance(data, dict):
            if candidate != path:
                log.warning("loaded %s from its backup %s", path.name, candidate.name)
            return data
        log.error("%s does not hold a JSON object; trying the backup", candidate)
    if seen:
        raise MetadataError(
            f"{path} and its backup are unreadable; repair or move them away to start empty"
        )
    return None


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
