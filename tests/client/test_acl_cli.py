"""``wharf acl ...`` (edits <store>/config/plain_acl.yml) and the CLI's signed calls
(``--access-key/--secret-key``, env WHARF_ACCESS_KEY / WHARF_SECRET_KEY), as a subprocess,
against a real daemon with aclEnable that picks up the CLI's edits without a restart."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

from wharf.broker.kit.acl.rules import Perm, parse_rules

from tests.broker.acl_helpers import ADMIN, write_acl
from tests.client.test_cli_e2e import json_lines, wharf
from tests.harness import Daemons

ADMIN_ONLY = f"accounts:\n  - accessKey: {ADMIN[0]}\n    secretKey: {ADMIN[1]}\n    admin: true\n"


def acl(store: Path, *args: str) -> tuple[int, str, str]:
    proc = wharf("", "acl", *args[:2], "--store", str(store), *args[2:])
    return proc.returncode, proc.stdout, proc.stderr


def test_user_create_list_grant_revoke_delete_never_show_the_secret(tmp_path: Path) -> None:
    store = tmp_path / "store"
    code, out, err = acl(store, "user", "create", "alice", "--secret", "alice-s3cret")
    assert code == 0, err
    assert "alice-s3cret" in out  # shown once, at creation
    path = store / "config" / "plain_acl.yml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    code, out, _ = acl(
        store, "grant", "alice", "--topic", "orders=PUB|SUB", "--topic", "logs-*=SUB"
    )
    assert code == 0
    assert acl(store, "grant", "alice", "--group", "billing=SUB")[0] == 0
    rules = parse_rules(path.read_text())  # what the broker will read
    alice = rules.accounts["alice"]
    assert alice.secret_key == "alice-s3cret" and not alice.admin
    assert alice.topic_perm("orders") == Perm.ANY and alice.topic_perm("logs-x") == Perm.SUB
    assert alice.group_perm("billing") == Perm.SUB and alice.topic_perm("other") == Perm.DENY

    proc = wharf("", "--json", "acl", "user", "list", "--store", str(store))
    assert proc.returncode == 0
    (listed,) = json_lines(proc)
    assert listed["access_key"] == "alice" and "orders=PUB|SUB" in listed["topic_perms"]
    assert "alice-s3cret" not in proc.stdout
    assert "alice-s3cret" not in wharf("", "acl", "user", "list", "--store", str(store)).stdout

    assert acl(store, "revoke", "alice", "--topic", "orders")[0] == 0
    assert acl(store, "grant", "alice", "--admin")[0] == 0
    alice = parse_rules(path.read_text()).accounts["alice"]
    assert alice.topic_perm("orders") == Perm.DENY and alice.admin

    # generated secret, printed once as JSON
    proc = wharf("", "--json", "acl", "user", "create", "bob", "--store", str(store))
    generated = json.loads(proc.stdout)["secret_key"]
    assert len(generated) >= 24
    assert parse_rules(path.read_text()).accounts["bob"].secret_key == generated

    code, _, err = acl(store, "user", "create", "alice")
    assert code == 5 and "ALREADY_EXISTS" in err
    code, _, err = acl(store, "grant", "nobody", "--topic", "t=PUB")
    assert code == 4 and "NOT_FOUND" in err
    code, _, err = acl(store, "grant", "alice", "--topic", "t=WRITE")
    assert code == 2 and "unknown permission" in err
    assert acl(store, "user", "delete", "bob")[0] == 0
    assert set(parse_rules(path.read_text()).accounts) == {"alice"}


def test_cli_signs_its_calls_and_the_broker_takes_cli_edits_live(
    daemons: Daemons, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    write_acl(store, ADMIN_ONLY)
    settings = {"aclEnable": True, "defaultTopicQueueNums": 2}
    with daemons.broker(tmp_path, settings=settings) as broker:
        ep = broker.endpoint
        anonymous = wharf(ep, "--json", "send", "orders", "hi")
        assert anonymous.returncode == 6
        assert json.loads(anonymous.stderr)["error"]["code"] == "UNAUTHENTICATED"

        assert acl(store, "user", "create", "alice", "--secret", "alice-s3cret")[0] == 0
        assert acl(store, "grant", "alice", "--topic", "orders=PUB")[0] == 0
        keys = ("--access-key", "alice", "--secret-key", "alice-s3cret")
        deadline = time.monotonic() + 10
        while (sent := wharf(ep, *keys, "send", "orders", "hi")).returncode != 0:
            assert time.monotonic() < deadline, sent.stderr  # reloaded within ~1 s
            time.sleep(0.2)

        env = {"WHARF_ACCESS_KEY": "alice", "WHARF_SECRET_KEY": "alice-s3cret"}
        listing = wharf(ep, "--json", "topic", "list", env=env)
        assert listing.returncode == 6
        error = json.loads(listing.stderr)["error"]
        assert (
            error["code"] == "PERMISSION_DENIED"
            and "user 'alice' is not an admin" in error["message"]
        )
        wrong = wharf(ep, "send", "orders", "x", env={**env, "WHARF_SECRET_KEY": "nope"})
        assert wrong.returncode == 6 and "UNAUTHENTICATED" in wrong.stderr
        admin_env = {"WHARF_ACCESS_KEY": ADMIN[0], "WHARF_SECRET_KEY": ADMIN[1]}
        listed = wharf(ep, "--json", "topic", "list", env=admin_env)
        assert listed.returncode == 0
        assert "orders" in {t["name"] for t in json_lines(listed)[0]}
        assert "alice-s3cret" not in broker.log() and ADMIN[1] not in broker.log()
