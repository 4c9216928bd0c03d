"""Read a settings file (TOML) for the broker and the NameServer alike: one place for the two
errors a user can make (an unreadable file, invalid TOML), each raised as the caller's own
configuration error with a message naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def read_settings_file(path: Path, error: type[Exception]) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"config file {path} is not valid TOML: {exc}") from None
