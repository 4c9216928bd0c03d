"""``wharf acl user create|list|delete`` and ``wharf acl grant|revoke``: the broker's accounts.

These commands EDIT THE FILE ``<store>/config/plain_acl.yml`` (``--store DIR``, the broker's
storePathRootDir; env ``WHARF_STORE_DIR``); a running broker with aclEnable reloads it within
about a second. Why the file and not admin RPCs: the first admin account has to come from
somewhere (a broker with ACL on and no account refuses every RPC), secrets never cross the
network or appear in an RPC reply, and the file's owner-only mode (0600, kept on every write)
is the protection, as for RocketMQ 4's plain_acl.yml. Writes are atomic (temporary file +
rename): the broker never reads half a file. Comments in the file are not kept.

The format is the broker's (wharf.broker.kit.acl.rules, which this package may not import: the
client never reaches into the broker); a file the broker would refuse is refused here too for
the fields these commands write (permission words, access key characters), and the broker
validates the whole file again on reload.

``user create NAME`` prints the secret once (generated when ``--secret`` is not given);
``user list`` never prints secrets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from pathlib import Path
from typing import Any

import yaml
from wharf.client.cli.output import Output
from wharf.client.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError

FILE_NAME = "plain_acl.yml"
PERMS = {"DENY": "DENY", "PUB": "PUB", "SUB": "SUB", "PUB|SUB": "PUB|SUB", "SUB|PUB": "PUB|SUB"}
HEADER = "# Wharf ACL (RocketMQ 4 plain_acl.yml shape); see broker/README.md\n"


def acl_path(args: argparse.Namespace) -> Path:
    """``--file``, else ``<--store>/config/plain_acl.yml``."""
    if getattr(args, "file", None):
        return Path(args.file)
    return Path(args.store) / "config" / FILE_NAME


def _perm(text: str) -> str:
    perm = PERMS.get(text.strip().upper().replace(" ", ""))
    if perm is None:
        raise InvalidArgumentError(f"unknown permission {text!r} (DENY, PUB, SUB, PUB|SUB)")
    return perm


def _resource(entry: str) -> tuple[str, str]:
    name, sep, perm = entry.rpartition("=")
    if not sep or not name.strip():
        raise InvalidArgumentError(f"expected NAME=PERM (e.g. 'orders=PUB|SUB'), got {entry!r}")
    return name.strip(), _perm(perm)


def load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"accounts": []}
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("accounts") or [], list):
        raise InvalidArgumentError(f"{path} is not an ACL file (a mapping with 'accounts')")
    doc["accounts"] = doc.get("accounts") or []
    return doc


def save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    text = HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _find(doc: dict[str, Any], name: str) -> dict[str, Any]:
    for account in doc["accounts"]:
        if isinstance(account, dict) and account.get("accessKey") == name:
            return account
    raise NotFoundError(f"no ACL user {name!r}")


def _set_perm(entries: list[str], name: str, perm: str | None) -> list[str]:
    """``entries`` without ``name``'s entry, plus ``name=perm`` unless perm is None."""
    kept = [e for e in entries if str(e).rpartition("=")[0].strip() != name]
    return [*kept, f"{name}={perm}"] if perm is not None else kept


def user_create(args: argparse.Namespace, out: Output) -> int:
    path = acl_path(args)
    doc = load(path)
    name = args.name
    if not name or any(c in name for c in " ,="):
        raise InvalidArgumentError("the access key must be a non-empty word (no space, ',' or '=')")
    if any(isinstance(a, dict) and a.get("accessKey") == name for a in doc["accounts"]):
        raise AlreadyExistsError(f"ACL user {name!r} exists (delete it first)")
    secret = args.secret or os.environ.get("WHARF_NEW_SECRET_KEY") or secrets.token_urlsafe(24)
    account: dict[str, Any] = {
        "accessKey": name,
        "secretKey": secret,
        "admin": bool(args.admin),
        "defaultTopicPerm": _perm(args.default_topic_perm),
        "defaultGroupPerm": _perm(args.default_group_perm),
        "topicPerms": [],
        "groupPerms": [],
    }
    if args.allow_from:
        account["whiteRemoteAddress"] = list(args.allow_from)
    doc["accounts"].append(account)
    save(path, doc)
    if out.as_json:
        out.data({"access_key": name, "secret_key": secret, "file": str(path)})
    else:
        out.line(f"created ACL user {name} in {path}")
        out.line(f"secret key (shown once): {secret}")
    return 0


def _public(account: dict[str, Any]) -> dict[str, Any]:
    """An account as shown: everything but the secret."""
    return {
        "access_key": account.get("accessKey"),
        "admin": bool(account.get("admin", False)),
        "default_topic_perm": account.get("defaultTopicPerm", "DENY"),
        "default_group_perm": account.get("defaultGroupPerm", "DENY"),
        "topic_perms": list(account.get("topicPerms") or []),
        "group_perms": list(account.get("groupPerms") or []),
        "white_remote_address": account.get("whiteRemoteAddress") or [],
    }


def user_list(args: argparse.Namespace, out: Output) -> int:
    doc = load(acl_path(args))
    users = [_public(a) for a in doc["accounts"] if isinstance(a, dict)]
    if out.as_json:
        for user in users:
            out.data(user)
        return 0
    out.table(
        "ACL users",
        ["access key", "admin", "default topic", "default group", "topics", "groups", "from"],
        [
            [
                u["access_key"],
                u["admin"],
                u["default_topic_perm"],
                u["default_group_perm"],
                ", ".join(u["topic_perms"]),
                ", ".join(u["group_perms"]),
                ", ".join(map(str, u["white_remote_address"]))
                if u["white_remote_address"]
                else "*",
            ]
            for u in users
        ],
    )
    return 0


def user_delete(args: argparse.Namespace, out: Output) -> int:
    path = acl_path(args)
    doc = load(path)
    account = _find(doc, args.name)
    doc["accounts"].remove(account)
    save(path, doc)
    out.line(f"deleted ACL user {args.name}") if not out.as_json else out.data(
        {"deleted": args.name}
    )
    return 0


def grant(args: argparse.Namespace, out: Output) -> int:
    path = acl_path(args)
    doc = load(path)
    account = _find(doc, args.name)
    for entry in args.topic or []:
        name, perm = _resource(entry)
        account["topicPerms"] = _set_perm(list(account.get("topicPerms") or []), name, perm)
    for entry in args.group or []:
        name, perm = _resource(entry)
        account["groupPerms"] = _set_perm(list(account.get("groupPerms") or []), name, perm)
    if args.admin:
        account["admin"] = True
    save(path, doc)
    out.data(_public(account)) if out.as_json else out.line(f"updated ACL user {args.name}")
    return 0


def revoke(args: argparse.Namespace, out: Output) -> int:
    path = acl_path(args)
    doc = load(path)
    account = _find(doc, args.name)
    for name in args.topic or []:
        account["topicPerms"] = _set_perm(list(account.get("topicPerms") or []), name, None)
    for name in args.group or []:
        account["groupPerms"] = _set_perm(list(account.get("groupPerms") or []), name, None)
    if args.admin:
        account["admin"] = False
    save(path, doc)
    out.data(_public(account)) if out.as_json else out.line(f"updated ACL user {args.name}")
    return 0


def _async(fn: Any) -> Any:
    async def run(args: argparse.Namespace, out: Output) -> int:
        return int(await asyncio.to_thread(fn, args, out))

    return run


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    acl = sub.add_parser(
        "acl",
        help="ACL accounts of a broker (edits <store>/config/plain_acl.yml; reloaded live)",
    )
    asub = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")

    def with_store(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument(
            "--store",
            default=os.environ.get("WHARF_STORE_DIR", "data"),
            help="the broker's storePathRootDir (env WHARF_STORE_DIR; default %(default)s)",
        )
        parser.add_argument(
            "--file",
            default=os.environ.get("WHARF_ACL_FILE"),
            help="the accounts file itself, when the broker's aclFile names one (env "
            "WHARF_ACL_FILE; wins over --store)",
        )
        return parser

    user = asub.add_parser("user", help="create, list or delete ACL users")
    usub = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    create = with_store(usub.add_parser("create", help="add a user (prints its secret once)"))
    create.add_argument("name", help="access key")
    create.add_argument(
        "--secret",
        help="secret key (default: env WHARF_NEW_SECRET_KEY, else 32 random characters)",
    )
    create.add_argument("--admin", action="store_true", help="may do everything")
    create.add_argument("--default-topic-perm", default="DENY", help="DENY, PUB, SUB, PUB|SUB")
    create.add_argument("--default-group-perm", default="DENY", help="DENY or SUB")
    create.add_argument(
        "--allow-from",
        action="append",
        metavar="ADDRESS",
        help="only from this address / CIDR / wildcard (repeatable; default any)",
    )
    create.set_defaults(run=_async(user_create))
    listing = with_store(usub.add_parser("list", help="list users (never their secrets)"))
    listing.set_defaults(run=_async(user_list))
    delete = with_store(usub.add_parser("delete", help="delete a user"))
    delete.add_argument("name")
    delete.set_defaults(run=_async(user_delete))

    grant_p = with_store(asub.add_parser("grant", help="grant topic/group permissions or admin"))
    grant_p.add_argument("name", help="access key")
    grant_p.add_argument("--topic", action="append", metavar="NAME=PERM", help="e.g. orders=PUB")
    grant_p.add_argument("--group", action="append", metavar="NAME=PERM", help="e.g. billing=SUB")
    grant_p.add_argument("--admin", action="store_true", help="make the user an admin")
    grant_p.set_defaults(run=_async(grant))

    revoke_p = with_store(asub.add_parser("revoke", help="remove topic/group entries or admin"))
    revoke_p.add_argument("name", help="access key")
    revoke_p.add_argument("--topic", action="append", metavar="NAME", help="entry to remove")
    revoke_p.add_argument("--group", action="append", metavar="NAME", help="entry to remove")
    revoke_p.add_argument("--admin", action="store_true", help="remove the admin flag")
    revoke_p.set_defaults(run=_async(revoke))
