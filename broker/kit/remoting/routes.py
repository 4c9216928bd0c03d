"""The NameServer codes of RocketMQ 4.x remoting, sans-IO: the JSON bodies of 105
GET_ROUTEINFO_BY_TOPIC (TopicRouteData), 106 GET_BROKER_CLUSTER_INFO (ClusterInfo), 206
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (TopicList), 304 GET_SYSTEM_TOPIC_LIST_FROM_NS (TopicList with
``brokerAddr``) and the 101 GET_KV_CONFIG / 17 TOPIC_NOT_EXIST answers, shared by the two servers that answer them: a broker for itself (``handlers.py``) and
the Wharf NameServer for every group registered with it (``wharf.broker.namesrv.remoting``).

Only ``codes`` and ``frame`` are imported: the NameServer uses nothing of the broker or the
store (the import-linter contract "namesrv stands alone").

Shapes (``../shared/reference/remoting.md`` 5.1), as fastjson writes them (fields sorted):

    {"brokerDatas":[{"brokerAddrs":{"0":"host:port","1":...},"brokerName":"a","cluster":"C"}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,
                    "writeQueueNums":4}]}

``brokerAddrs`` keys are quoted (fastjson leaves them bare; the C++ client, ali-ons and Java
accept both). Id 0 is the master; a group whose master is missing keeps its slaves (consumers
read there) and the 4.x producers skip it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wharf.broker.kit.remoting.codes import ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to

__all__ = [
    "GroupAddresses",
    "GroupQueues",
    "cluster_info_response",
    "json_body",
    "kv_config_not_found",
    "route_response",
    "system_topic_list_response",
    "topic_list_response",
    "topic_not_exist",
]


@dataclass(frozen=True, slots=True)
class GroupAddresses:
    """A broker group as routes name it: broker id -> remoting address (0: the master)."""

    cluster: str
    broker_name: str
    addresses: Mapping[int, str]

    def broker_data(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(i): a for i, a in sorted(self.addresses.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass(frozen=True, slots=True)
class GroupQueues:
    """A topic's queues on one group (``perm``: 4 read | 2 write)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int

    def queue_data(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": 0,  # 4.9.x's QueueData (topicSynFlag before 4.9.0)
            "writeQueueNums": self.write_queue_nums,
        }


def json_body(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def route_response(
    request: RemotingCommand, groups: Iterable[GroupAddresses], queues: Iterable[GroupQueues]
) -> RemotingCommand:
    """105's answer: TopicRouteData (groups and queues sorted by broker name)."""
    route = {
        "brokerDatas": [g.broker_data() for g in sorted(groups, key=lambda g: g.broker_name)],
        "filterServerTable": {},
        "queueDatas": [q.queue_data() for q in sorted(queues, key=lambda q: q.broker_name)],
    }
    return response_to(request, ResponseCode.SUCCESS, body=json_body(route))


def topic_not_exist(request: RemotingCommand, topic: str) -> RemotingCommand:
    """105 for a topic without a route, as the Java NameServer words it (the C++ producer then
    routes through TBW102; ali-ons fails)."""
    return response_to(
        request,
        ResponseCode.TOPIC_NOT_EXIST,
        remark=f"No topic route info in name server for the topic: {topic}",
    )


def cluster_info_response(
    request: RemotingCommand, groups: Iterable[GroupAddresses]
) -> RemotingCommand:
    """106's answer: ``brokerAddrTable`` {name: BrokerData}, ``clusterAddrTable`` {cluster:
    [names]} (names sorted)."""
    table: dict[str, dict[str, Any]] = {}
    clusters: dict[str, list[str]] = {}
    for group in sorted(groups, key=lambda g: (g.cluster, g.broker_name)):
        table[group.broker_name] = group.broker_data()
        clusters.setdefault(group.cluster, []).append(group.broker_name)
    info = {"brokerAddrTable": table, "clusterAddrTable": clusters}
    return response_to(request, ResponseCode.SUCCESS, body=json_body(info))


def topic_list_response(request: RemotingCommand, topics: Iterable[str]) -> RemotingCommand:
    """206's answer: ``{"topicList": [...]}`` (sorted)."""
    return response_to(
        request, ResponseCode.SUCCESS, body=json_body({"topicList": sorted(set(topics))})
    )


def system_topic_list_response(
    request: RemotingCommand, groups: Iterable[GroupAddresses]
) -> RemotingCommand:
    """304's answer, as the Java NameServer's RouteInfoManager.getSystemTopicList: the cluster
    and broker group names as "system topics" and ``brokerAddr``, one broker's address, which the
    Java client (MQClientAPIImpl.getSystemTopicList: the Dashboard's topic page) then asks 305
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER for the real ones; it fails the page on any other code."""
    names: set[str] = set()
    address = None
    for group in sorted(groups, key=lambda g: (g.cluster, g.broker_name)):
        names.update((group.cluster, group.broker_name))
        if address is None and group.addresses:
            address = group.addresses[min(group.addresses)]
    body: dict[str, Any] = {"topicList": sorted(names)}
    if address is not None:
        body["brokerAddr"] = address
    return response_to(request, ResponseCode.SUCCESS, body=json_body(body))


def kv_config_not_found(request: RemotingCommand) -> RemotingCommand:
    """101: Wharf keeps no KV config (Java clients ask ORDER_TOPIC_CONFIG): 22, as the Java
    NameServer answers an absent key."""
    namespace = request.ext_fields.get("namespace", "")
    key = request.ext_fields.get("key", "")
    return response_to(
        request,
        ResponseCode.QUERY_NOT_FOUND,
        remark=f"No config item, Namespace: {namespace} Key: {key}",
    )
