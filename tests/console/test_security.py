"""Binding, the Host check, credentials and sessions, the security headers, and the CLI's
refusal of a public bind without credentials (plain HTTP through Starlette's TestClient)."""

from __future__ import annotations

import base64
import subprocess
import sys
import time

import pytest
from starlette.testclient import TestClient
from wharf.client.console.security import (
    SESSION_COOKIE,
    BindRefused,
    Guard,
    Sessions,
    check_bind,
    is_loopback,
    split_listen,
)
from wharf.client.sync import Admin

from tests.console.conftest import csrf_of, make_client, post
from tests.harness import REPO_ROOT, BrokerProcess


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.0.1", "::1", "localhost"])
def test_loopback_binds_need_no_credentials(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, auth_token=None, basic_auth=None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "console.example.com"])
def test_public_bind_needs_credentials(host: str) -> None:
    with pytest.raises(BindRefused, match=r"--auth-token .* --basic-auth"):
        check_bind(host, auth_token=None, basic_auth=None)
    check_bind(host, auth_token="t0ken", basic_auth=None)
    check_bind(host, auth_token=None, basic_auth="ops:pw")


def test_split_listen() -> None:
    assert split_listen("0.0.0.0:8082") == ("0.0.0.0", 8082)
    assert split_listen("[::1]:9000") == ("::1", 9000)
    for bad in ("8082", "host:", "host:99999", ":80"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            split_listen(bad)


def test_cli_refuses_public_bind_at_once() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "console", "--listen", "0.0.0.0:8082"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "WHARF_CONSOLE_TOKEN": ""},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--auth-token" in done.stderr and "--basic-auth" in done.stderr
    assert time.monotonic() - started < 30


def test_cli_help_lists_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "console", "--help"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    for option in ("--endpoints", "--listen", "--auth-token", "--basic-auth"):
        assert option in done.stdout


TOKEN = "s3cret-token"
ORIGIN = {"Origin": "http://console.test"}


def token_client(broker: BrokerProcess, **guard: object) -> TestClient:
    return make_client(
        [broker.endpoint], Guard(auth_token=TOKEN, allowed_hosts=["console.test"], **guard)
    )


def test_token_auth_by_header(broker: BrokerProcess) -> None:
    with token_client(broker) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        for scheme in ("Bearer", "bearer", "BEARER"):  # RFC 7235: the scheme is case-insensitive
            page = client.get("/", headers={"Authorization": f"{scheme} {TOKEN}"})
            assert page.status_code == 200, scheme
        assert "set-cookie" not in page.headers  # a header is not a login: no session
        assert client.get("/static/console.css").status_code == 200  # assets are open


def test_login_form_opens_a_session_not_holding_the_token(broker: BrokerProcess) -> None:
    with token_client(broker) as client:
        form = client.get("/login")
        assert form.status_code == 200 and 'action="/login"' in form.text
        assert 'name="token"' in form.text and TOKEN not in form.text
        wrong = client.post("/login", data={"token": "nope"}, headers=ORIGIN)
        assert wrong.status_code == 401 and "Wrong token" in wrong.text
        assert "set-cookie" not in wrong.headers
        login = client.post(
            "/login",
            data={"token": TOKEN, "next": "/groups"},
            headers=ORIGIN,
            follow_redirects=False,
        )
        assert (login.status_code, login.headers["location"]) == (303, "/groups")
        cookie = login.headers["set-cookie"]
        attributes = {part.strip().lower() for part in cookie.split(";")}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        name, _, session = cookie.split(";")[0].partition("=")
        assert name == SESSION_COOKIE and len(session) >= 43 and TOKEN not in cookie
        assert client.get("/topics").status_code == 200  # the session cookie now
        # No open redirect through next=.
        away = client.post(
            "/login",
            data={"token": TOKEN, "next": "//evil.example/"},
            headers=ORIGIN,
            follow_redirects=False,
        )
        assert away.headers["location"] == "/"
        # Log out: the session is gone from the table, its cookie opens nothing.
        current = client.cookies[SESSION_COOKIE]  # the second login's
        logout = post(client, "/logout", {})
        assert logout.status_code == 303 and logout.headers["location"] == "/login"
        client.cookies.clear()
        stale = {"Cookie": f"{SESSION_COOKIE}={current}"}
        assert client.get("/topics", headers=stale).status_code == 401


def test_refusals_token_in_url_missing_or_forged_cookie(broker: BrokerProcess) -> None:
    with token_client(broker) as client:
        old = client.get("/login", params={"token": TOKEN}, follow_redirects=False)
        assert old.status_code == 400 and "no longer goes in the URL" in old.text
        assert "set-cookie" not in old.headers
        assert client.get("/topics").status_code == 401  # no cookie
        for value in (TOKEN, "made-up-session-id", ""):  # the raw token is no cookie any more
            client.cookies.clear()
            refused = client.get("/topics", headers={"Cookie": f"{SESSION_COOKIE}={value}"})
            assert refused.status_code == 401, value
        # A browser's page request gets the login form (401), which comes back to the page.
        page = client.get("/groups?page=2", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'value="/groups?page=2"' in page.text
        # A cross-site login POST is refused before the token is looked at.
        cross = client.post("/login", data={"token": TOKEN},
                            headers={"Origin": "http://evil.example"})  # fmt: skip
        assert cross.status_code == 403 and "set-cookie" not in cross.headers
        huge = client.post("/login", data={"token": "x" * 10_000}, headers=ORIGIN)
        assert huge.status_code == 403


def test_wrong_host_is_refused_before_anything(broker: BrokerProcess, name: str) -> None:
    """DNS rebinding: evil.example resolved to 127.0.0.1 makes the browser send its name."""
    with make_client([broker.endpoint], Guard()) as client:  # listen 127.0.0.1, no credentials
        evil = {"Host": "rebind.evil.example:8082"}
        for path in ("/", "/topics", "/static/console.css", "/login"):
            refused = client.get(path, headers=evil)
            assert refused.status_code == 421, path
            assert "--allowed-host" in refused.text and "csrf_token" not in refused.text
        token = csrf_of(client.get("/topics", headers={"Host": "127.0.0.1:8082"}).text)
        created = client.post(
            "/topics",
            data={"csrf_token": token, "name": name, "queues": "1"},
            headers={**evil, "Origin": "http://rebind.evil.example:8082"},
        )
        assert created.status_code == 421
        with Admin(broker.endpoint) as admin:
            assert name not in {t.name for t in admin.list_topics().topics}
        for host in ("127.0.0.1:8082", "localhost:8082", "LOCALHOST.", "[::1]:8082", "127.0.0.1"):
            assert client.get("/static/console.css", headers={"Host": host}).status_code == 200


def test_host_rules_by_listen_address() -> None:
    loopback = Guard(listen_host="127.0.0.1")
    assert loopback.host_allowed("localhost:8082") and loopback.host_allowed("127.0.0.2")
    assert not loopback.host_allowed("10.0.0.5:8082")
    assert not loopback.host_allowed("rebind.evil.example")
    for junk in (None, "", "a:b:c", "::1", "[::1", "host:port"):
        assert not loopback.host_allowed(junk), junk
    named = Guard(listen_host="console.example.com", allowed_hosts=["wharf.example.org"])
    assert named.host_allowed("console.example.com:8082")
    assert named.host_allowed("WHARF.example.org")
    assert not named.host_allowed("localhost")  # it does not listen on loopback
    assert not named.host_allowed("10.0.0.5")
    wildcard = Guard(listen_host="0.0.0.0")  # a container: reached by address or published port
    for host in ("localhost:8083", "127.0.0.1:8082", "10.0.0.5:8082", "[fd00::5]:8082"):
        assert wildcard.host_allowed(host), host
    assert not wildcard.host_allowed("rebind.evil.example")
    with pytest.raises(ValueError, match="--allowed-host"):
        Guard(allowed_hosts=["a:b:c"])


def test_every_answer_forbids_framing_and_carries_a_csp(broker: BrokerProcess) -> None:
    with token_client(broker) as client:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        answers = [
            client.get("/", headers=bearer),
            client.get("/topics/no-such-topic", headers=bearer),  # an error page
            client.get("/"),  # 401
            client.get("/login"),
            client.get("/static/console.js"),
            client.get("/", headers={"Host": "evil.example"}),  # 421
        ]
        for answer in answers:
            assert answer.headers["x-frame-options"] == "DENY", answer.url
            csp = answer.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
            assert "unsafe-inline" not in csp
            assert answer.headers["x-content-type-options"] == "nosniff"


def test_sessions_are_bounded_and_expire() -> None:
    now = [0.0]
    sessions = Sessions(ttl_s=60, limit=3, clock=lambda: now[0])
    first, second, third = sessions.open(), sessions.open(), sessions.open()
    assert len({first, second, third}) == 3 and all(map(sessions.valid, (first, second, third)))
    fourth = sessions.open()  # past the bound: the oldest goes
    assert len(sessions) == 3 and not sessions.valid(first) and sessions.valid(fourth)
    now[0] = 61
    assert not sessions.valid(second)
    sessions.open()  # expired ones are dropped at the next login
    assert len(sessions) == 1
    assert not sessions.valid("")


def test_basic_auth(broker: BrokerProcess) -> None:
    guard = Guard(basic_auth="ops:pa:ss", allowed_hosts=["console.test"])
    with make_client([broker.endpoint], guard) as client:
        refused = client.get("/groups")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        good = base64.b64encode(b"ops:pa:ss").decode()
        bad = base64.b64encode(b"ops:nope").decode()
        assert client.get("/groups", headers={"Authorization": f"Basic {bad}"}).status_code == 401
        assert client.get("/groups", headers={"Authorization": "Basic !!"}).status_code == 401
        assert client.get("/groups", headers={"Authorization": f"Basic {good}"}).status_code == 200
    with pytest.raises(ValueError, match="USER:PASSWORD"):
        Guard(basic_auth="nocolon")
