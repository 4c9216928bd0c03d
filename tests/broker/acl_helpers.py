"""Shared by the ACL tests: a broker with aclEnable and four accounts, and signed metadata
computed the way the official clients compute it (independently of wharf's own code)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import message_factory

ADMIN = ("root", "root-secret")
PRODUCER = ("producer", "producer-secret")
CONSUMER = ("consumer", "consumer-secret")
CONSUMER2 = ("consumer2", "consumer2-secret")  # CONSUMER's permissions, another account
NOBODY = ("nobody", "nobody-secret")
REMOTE_ONLY = ("remote", "remote-secret")  # allowed from 10.0.0.0/8 only
TOPIC = "orders"
GROUP = "billing"

ACL_YAML = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    topicPerms: ["{TOPIC}=PUB", "orders-*=PUB"]
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    topicPerms: ["{TOPIC}=SUB"]
    groupPerms: ["{GROUP}=SUB"]
  - accessKey: {CONSUMER2[0]}
    secretKey: {CONSUMER2[1]}
    topicPerms: ["{TOPIC}=SUB"]
    groupPerms: ["{GROUP}=SUB"]
  - accessKey: {NOBODY[0]}
    secretKey: {NOBODY[1]}
  - accessKey: {REMOTE_ONLY[0]}
    secretKey: {REMOTE_ONLY[1]}
    admin: true
    whiteRemoteAddress: 10.0.0.0/8
"""
ACL_SETTINGS = {"aclEnable": True, "defaultTopicQueueNums": 4}


@contextlib.contextmanager
def acl_broker(daemons: Any, root: Path) -> Iterator[Any]:
    """A broker with aclEnable and the accounts of ACL_YAML, its store under ``root`` (the
    ACL test modules' one broker each)."""
    write_acl(root / "store")
    with daemons.broker(root, settings=ACL_SETTINGS) as proc:
        yield proc


def write_acl(store_dir: Path, text: str = ACL_YAML) -> Path:
    path = store_dir / "config" / "plain_acl.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("acl.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def date_now(delta_s: float = 0.0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delta_s)
    return moment.strftime("%Y%m%dT%H%M%SZ")


def signed(
    account: tuple[str, str], *, date: str | None = None, secret: str | None = None
) -> tuple[tuple[str, str], ...]:
    ak, sk = account
    date = date or date_now()
    signature = hmac.new((secret or sk).encode(), date.encode(), hashlib.sha1).hexdigest()
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"
    return (("x-mq-date-time", date), ("authorization", auth))


def empty_request(method: Any) -> Any:
    return message_factory.GetMessageClass(method.input_type)()


def response_class(method: Any) -> Any:
    return message_factory.GetMessageClass(method.output_type)
