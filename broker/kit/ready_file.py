"""The ``--ready-file`` of the broker and the NameServer: JSON written once the process serves
(tests and supervisors wait for it instead of polling a port)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_ready_file_blocking(path: Path, info: dict[str, object]) -> None:
    """Atomically (tmp + rename): a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)
