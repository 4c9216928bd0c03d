"""Binding, credentials and the CLI's refusal of a public bind without them."""

from __future__ import annotations

import base64
import subprocess
import sys
import time

import pytest
from wharf.client.console.security import BindRefused, Guard, check_bind, is_loopback, split_listen

from tests.console.conftest import make_client
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


def test_token_auth(broker: BrokerProcess) -> None:
    with make_client([broker.endpoint], Guard(auth_token="s3cret")) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/static/console.css").status_code == 200  # assets are open
        assert client.get("/login", params={"token": "nope"}).status_code == 401
        login = client.get("/login", params={"token": "s3cret"}, follow_redirects=False)
        assert login.status_code == 303
        assert "httponly" in login.headers["set-cookie"].lower()
        assert client.get("/topics").status_code == 200  # the cookie now


def test_basic_auth(broker: BrokerProcess) -> None:
    with make_client([broker.endpoint], Guard(basic_auth="ops:pa:ss")) as client:
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
