"""ACL (``aclEnable``) on the remoting port, broker and NameServer: RocketMQ 4's signed extFields
checked against the same accounts and the same permissions as wharf.v1 and
apache.rocketmq.v2 (``wharf.broker.kit.acl``).

Every request whose code has a handler is checked before it runs (an unserved code is answered
REQUEST_CODE_NOT_SUPPORTED unchecked, as RocketMQ's NettyRemotingServer does):

1. authentication (``wharf.broker.kit.acl.rpc_hook``): ``AccessKey`` a known account whose secret
   signed the request (``Signature`` = base64 HMAC-SHA1 over the sorted extField values and the
   body, as Java's ``AclClientRPCHook`` and the C++ client sign); ``SecurityToken`` is signed
   but not checked (RocketMQ's plain ACL does not check it either);
2. addresses: the peer's IP must match ``globalWhiteRemoteAddresses`` and the account's
   ``whiteRemoteAddress`` when they are set (Wharf's rule on every protocol: an allow-list
   restricts; RocketMQ 4 let a matching address through without a signature);
3. authorization: the ``Need``s of the request code (``ACCESS`` below; admins pass all).

A refusal is answered 16 NO_PERMISSION with the reason as remark (``REMOTING_REFUSALS``; Java's
broker answers ACL errors with the same code), logged at most once a minute per code and kind,
counted in the RPC metrics as ``remoting.<CODE NAME>`` (broker). The connection goes on.

``ACCESS`` maps each served request code to what it touches, after RocketMQ's
``PlainAccessResource.parse`` and with Wharf's table (``wharf.broker.kit.acl.table``) where the
same operation exists on the other protocols, so one account gets the same answer everywhere:

- sends (10, 310, 320): PUB on the topic (a ``%RETRY%g`` / ``%DLQ%g`` topic: SUB on group g);
- 11 PULL_MESSAGE, 14 QUERY_CONSUMER_OFFSET, 15 UPDATE_CONSUMER_OFFSET: SUB on the topic and
  the consumer group;
- 34 HEART_BEAT: SUB on every consumer group and every subscribed topic it carries (producer
  groups: none); 35 UNREGISTER_CLIENT, 38 GET_CONSUMER_LIST_BY_GROUP, 36 CONSUMER_SEND_MSG_BACK:
  SUB on the group; 41/42 LOCK/UNLOCK_BATCH_MQ: SUB on the group and every topic of ``mqSet``;
- 29, 30, 31 (offsets by time, max, min), 12 QUERY_MESSAGE: SUB on the topic; 105
  GET_ROUTEINFO_BY_TOPIC: PUB or SUB on it (its route may create it: autoCreateTopicEnable, the
  ``%RETRY%`` topics);
- 37 END_TRANSACTION: PUB on the topic of the half it resolves (found by
  ``tranStateTableOffset``; a half that is not open, or an UNKNOWN answer, changes nothing:
  authenticated only);
- 101 GET_KV_CONFIG, 106 GET_BROKER_CLUSTER_INFO, 304/305 GET_SYSTEM_TOPIC_LIST_*: authenticated
  only (the NameServer's GetClusterInfo; 305 is a fixed list of names);
- admin: 17, 215, 200 (topic and group changes), 21, 202, 208, 203, 28, 206, 26, 201, 204, 207, 222, 300, 307, 309 (every
  topic, group, client or counter: wharf.v1's AdminService), 33 VIEW_MESSAGE_BY_ID (no topic
  named).

tests/broker/remoting/test_acl.py fails on a served code without an entry here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from wharf.broker.kit.acl.accounts import AccountChecker, Denied, Unauthenticated
from wharf.broker.kit.acl.caller import set_caller
from wharf.broker.kit.acl.refusals import Refusals
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.kit.acl.table import ADMIN, Need
from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode, request_code_name
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to

__all__ = ["ACCESS", "REMOTING_REFUSALS", "RemotingAcl"]

log = logging.getLogger("broker.remoting")

REMOTING_REFUSALS = Refusals(
    ("UNAUTHENTICATED", ResponseCode.NO_PERMISSION),
    ("NO_PERMISSION", ResponseCode.NO_PERMISSION),
    metric_prefix="remoting.",
    # (the request, code, message): the refusal answers the request (its opaque, its type)
    reply=lambda request, code, message: response_to(request, code, remark=message),
)

NeedsOf = Callable[[RemotingCommand], list[Need]]
ResolveNeeds = Callable[[RemotingCommand], Awaitable[list[Need]]]
Observe = Callable[[str, str, float], None]


def _authenticated(request: RemotingCommand) -> list[Need]:
    return []


def _admin(request: RemotingCommand) -> list[Need]:
    return [ADMIN]


def _needs(*pairs: tuple[str, str | None, Perm]) -> list[Need]:
    """The named resources (an absent name: nothing -- the handler refuses the request)."""
    return [Need(kind, name, perm) for kind, name, perm in pairs if name]


def _topic(perm: Perm, field: str = "topic") -> NeedsOf:
    return lambda r: _needs(("topic", r.ext_fields.get(field), perm))


def _group(field: str) -> NeedsOf:
    return lambda r: _needs(("group", r.ext_fields.get(field), Perm.SUB))


def _topic_group(group_field: str) -> NeedsOf:
    return lambda r: _needs(
        ("topic", r.ext_fields.get("topic"), Perm.SUB),
        ("group", r.ext_fields.get(group_field), Perm.SUB),
    )


def _send(request: RemotingCommand) -> list[Need]:
    """SEND_MESSAGE names the topic ``topic``, V2 and BATCH ``b`` (SendMessageRequestHeaderV2)."""
    field = "topic" if request.code == RequestCode.SEND_MESSAGE else "b"
    return _needs(("topic", request.ext_fields.get(field), Perm.PUB))


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8", "replace").strip() or "{}")
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        return None  # the handler answers the bad body


def _dicts(value: Any) -> Iterable[dict[str, Any]]:
    return (v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()


def _heartbeat(request: RemotingCommand) -> list[Need]:
    """SUB on each consumer group and each topic it subscribes (PlainAccessResource.parse)."""
    data = _json(request.body)
    if not isinstance(data, dict):
        return []
    needs: list[Need] = []
    for consumer in _dicts(data.get("consumerDataSet")):
        needs += _needs(("group", str(consumer.get("groupName") or ""), Perm.SUB))
        for sub in _dicts(consumer.get("subscriptionDataSet")):
            needs += _needs(("topic", str(sub.get("topic") or ""), Perm.SUB))
    return needs


def _client_config(request: RemotingCommand) -> list[Need]:
    """CHECK_CLIENT_CONFIG: SUB on the group and the subscription's topic."""
    data = _json(request.body)
    if not isinstance(data, dict):
        return []
    subscription = data.get("subscriptionData")
    topic = str(subscription.get("topic") or "") if isinstance(subscription, dict) else ""
    return _needs(("group", str(data.get("group") or ""), Perm.SUB), ("topic", topic, Perm.SUB))


def _batch_lock(request: RemotingCommand) -> list[Need]:
    """LOCK/UNLOCK_BATCH_MQ: SUB on the group and each queue's topic (LockBatchRequestBody)."""
    data = _json(request.body)
    if not isinstance(data, dict):
        return []
    needs = _needs(("group", str(data.get("consumerGroup") or ""), Perm.SUB))
    topics = {str(mq.get("topic") or "") for mq in _dicts(data.get("mqSet"))}
    return needs + _needs(*(("topic", t, Perm.SUB) for t in sorted(topics)))


C = RequestCode
ACCESS: dict[int, NeedsOf] = {
    int(code): needs
    for code, needs in {
        # NameServer codes (the broker answers them too)
        C.GET_ROUTEINFO_BY_TOPIC: _topic(Perm.ANY),
        C.GET_BROKER_CLUSTER_INFO: _authenticated,
        C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _admin,
        C.GET_KV_CONFIG: _authenticated,
        C.GET_SYSTEM_TOPIC_LIST_FROM_NS: _authenticated,
        C.WIPE_WRITE_PERM_OF_BROKER: _admin,
        C.ADD_WRITE_PERM_OF_BROKER: _admin,
        # clients
        C.HEART_BEAT: _heartbeat,
        C.UNREGISTER_CLIENT: _group("consumerGroup"),
        C.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup"),
        C.CHECK_CLIENT_CONFIG: _client_config,
        C.SEND_MESSAGE: _send,
        C.SEND_MESSAGE_V2: _send,
        C.SEND_BATCH_MESSAGE: _send,
        C.PULL_MESSAGE: _topic_group("consumerGroup"),
        C.QUERY_CONSUMER_OFFSET: _topic_group("consumerGroup"),
        C.UPDATE_CONSUMER_OFFSET: _topic_group("consumerGroup"),
        C.GET_MAX_OFFSET: _topic(Perm.SUB),
        C.GET_MIN_OFFSET: _topic(Perm.SUB),
        C.SEARCH_OFFSET_BY_TIMESTAMP: _topic(Perm.SUB),
        C.GET_EARLIEST_MSG_STORETIME: _topic(Perm.SUB),
        C.CONSUMER_SEND_MSG_BACK: _group("group"),
        C.END_TRANSACTION: _authenticated,  # + the half's topic: a resolver (broker)
        C.LOCK_BATCH_MQ: _batch_lock,
        C.UNLOCK_BATCH_MQ: _batch_lock,
        C.QUERY_MESSAGE: _topic(Perm.SUB),
        # admin and tools
        C.UPDATE_AND_CREATE_TOPIC: _admin,
        C.DELETE_TOPIC_IN_BROKER: _admin,
        C.DELETE_TOPIC_IN_NAMESRV: _admin,
        C.GET_ALL_TOPIC_CONFIG: _admin,
        C.GET_TOPIC_STATS_INFO: _admin,
        C.GET_CONSUME_STATS: _admin,
        C.GET_CONSUMER_CONNECTION_LIST: _admin,
        C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _admin,
        C.GET_BROKER_RUNTIME_INFO: _admin,
        C.VIEW_MESSAGE_BY_ID: _admin,
        C.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: _authenticated,
        C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _admin,
        C.QUERY_TOPIC_CONSUME_BY_WHO: _admin,
        C.GET_CONSUMER_RUNNING_INFO: _admin,
        C.CONSUME_MESSAGE_DIRECTLY: _admin,
        C.GET_PRODUCER_CONNECTION_LIST: _admin,
        C.DELETE_SUBSCRIPTIONGROUP: _admin,
        C.INVOKE_BROKER_TO_RESET_OFFSET: _admin,
        C.GET_BROKER_CONFIG: _admin,
        C.UPDATE_BROKER_CONFIG: _admin,
        C.GET_ALL_CONSUMER_OFFSET: _admin,
        C.GET_TOPIC_CONFIG: _admin,
    }.items()
}


class RemotingAcl:
    """The check a ``RemotingServer`` runs before each handler (``check``): None when allowed,
    else the refusal to answer. ``resolvers`` add needs that take a look at the broker's state
    (END_TRANSACTION's half); ``observe`` counts refusals (the broker's RPC metrics)."""

    def __init__(
        self,
        checker: AccountChecker,
        access: Mapping[int, NeedsOf] = ACCESS,
        resolvers: Mapping[int, ResolveNeeds] | None = None,
        observe: Observe | None = None,
        refusals: Refusals = REMOTING_REFUSALS,
    ) -> None:
        self.checker = checker
        self.access = dict(access)
        self.resolvers = dict(resolvers or {})
        self._observe = observe
        self.refusals = refusals

    async def check(self, peer_host: str, request: RemotingCommand) -> RemotingCommand | None:
        started = time.perf_counter()
        checker = self.checker
        code = request.code
        name = request_code_name(code)
        try:
            account = checker.authenticate_fields(
                request.ext_fields, request.body, request.version, peer_host
            )
            set_caller(account.access_key, account.admin)  # this request's task only
            if not account.admin:
                needs_of = self.access.get(code, _admin)  # a code without an entry: admin
                needs = needs_of(request)
                resolve = self.resolvers.get(code)
                if resolve is not None:
                    needs = needs + await resolve(request)
                checker.authorize(account, needs, name)
            return None
        except Unauthenticated as exc:
            (kind, status), message = self.refusals.unauthenticated, f"unauthenticated: {exc}"
        except Denied as exc:
            (kind, status), message = self.refusals.denied, f"permission denied: {exc}"
        if self._observe is not None:
            self._observe(
                f"{self.refusals.metric_prefix}{name}", kind, time.perf_counter() - started
            )
        checker.log_refusal(
            f"remoting/{name} {kind}", f"remoting {name} from {peer_host}: {message}"
        )
        reply = self.refusals.reply
        assert reply is not None
        return reply(request, status, message)  # type: ignore[no-any-return]
