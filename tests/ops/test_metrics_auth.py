"""/metrics' bearer check (``bearer_guard``) as a WSGI app: the scheme in any case (RFC 7235
section 2.1), the token compared exactly."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from wharf.broker.metrics.http import bearer_guard

TOKEN = "tok-0123456789abcdef"


def _status(authorization: str | None) -> str:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"metrics"]

    environ = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    seen: list[str] = []
    body = b"".join(bearer_guard(app, TOKEN)(environ, lambda s, h: seen.append(s)))
    assert (body == b"metrics") == seen[0].startswith("200")
    return seen[0]


@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"bEaReR  {TOKEN} "],
)
def test_the_scheme_is_case_insensitive(header: str) -> None:
    assert _status(header) == "200 OK"


@pytest.mark.parametrize(
    "header",
    [None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x",
     f"Bearer{TOKEN}", f"Bearer {TOKEN.upper()}", "Bearer"],
)  # fmt: skip
def test_anything_else_is_refused(header: str | None) -> None:
    assert _status(header).startswith("401")
