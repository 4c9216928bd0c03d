"""Exit codes of the ``wharf`` CLI (stable: scripts may rely on them).

| code | meaning |
|---|---|
| 0 | success |
| 1 | the broker rejected or failed the request (INVALID_ARGUMENT, INTERNAL, ...) |
| 2 | usage error: bad or missing arguments (detected before calling the broker) |
| 3 | broker unavailable: cannot connect, shutting down, or the deadline passed |
| 4 | not found: topic, group or message does not exist |
| 5 | already exists (e.g. ``topic create`` of an existing topic) |
| 6 | access refused: UNAUTHENTICATED (no or a wrong signature) or PERMISSION_DENIED |
| 130 | interrupted (Ctrl-C) |
"""

from __future__ import annotations

from wharf.client.errors import WharfError

OK = 0
BROKER_ERROR = 1
USAGE = 2
UNAVAILABLE = 3
NOT_FOUND = 4
ALREADY_EXISTS = 5
ACCESS_REFUSED = 6
INTERRUPTED = 130

_BY_CODE = {
    "UNAVAILABLE": UNAVAILABLE,
    "DEADLINE_EXCEEDED": UNAVAILABLE,
    "CLIENT_CLOSED": UNAVAILABLE,
    "NOT_FOUND": NOT_FOUND,
    "ALREADY_EXISTS": ALREADY_EXISTS,
    "UNAUTHENTICATED": ACCESS_REFUSED,
    "PERMISSION_DENIED": ACCESS_REFUSED,
}


def exit_code_for(error: WharfError) -> int:
    return _BY_CODE.get(error.code, BROKER_ERROR)
