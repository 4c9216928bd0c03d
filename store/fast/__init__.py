"""Accelerated twins of the reference (pure Python) code: numpy column versions and compiled C
modules (see README.md here for the pairs and the differential test of each).

``load(name)`` is the ONE place that decides whether a compiled module is used: it returns
``wharf.store.fast.<name>``, or None when the install did not build it (no compiler: the C
extensions are optional in pyproject.toml) or when ``WHARF_NO_SPEEDUPS`` is set (to measure or
debug the pure-Python paths). Callers keep their reference path for None. This module stays
light (no numpy): the SDK imports it.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

# The compiled modules built from this folder's *.c (declared in pyproject.toml).
COMPILED = (
    "_kafka_convert",
    "_log_scan",
    "_record_check",
    "_record_decoder",
    "_record_encoder",
    "_syncer",
)


def speedups_disabled() -> bool:
    """Whether ``WHARF_NO_SPEEDUPS`` asks for the pure-Python paths (read at each load)."""
    return bool(os.environ.get("WHARF_NO_SPEEDUPS"))


def load(name: str) -> ModuleType | None:
    """The compiled module ``wharf.store.fast.<name>``, or None (not built, or disabled)."""
    if name not in COMPILED:
        raise ValueError(f"{name!r} is not a compiled accelerator ({', '.join(COMPILED)})")
    if speedups_disabled():
        return None
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError:  # no compiler at install time: the caller's Python path
        return None
