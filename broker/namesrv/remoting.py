"""The NameServer's RocketMQ 4.x remoting port (``--remoting-listen``): the route codes a 4.x
client (C++, ali-ons, Java ``DefaultMQProducer``, mqadmin) asks its ``namesrvAddr``, answered
for every group registered with this NameServer, over the same ``RouteTable`` as gRPC.

- 105 GET_ROUTEINFO_BY_TOPIC: the topic's route (``RouteTable.route``) with each broker's
  **remoting** address (``BrokerRegistration.remoting_address``): ``brokerAddrs`` {"0": master,
  "1"...: slaves}, one queueData per group. Brokers registered without a remoting port are left
  out (a 4.x client cannot speak to them); a group left without any is left out with its queues;
  a group whose master has no remoting port (or is gone) keeps its slaves, read-only. No group
  left: 17 TOPIC_NOT_EXIST, as for an unknown topic. ``%RETRY%<group>`` before any broker holds
  it: one queue on every master with a remoting port (the C++ consumer asks it before its first
  heartbeat, which makes it on those brokers; RocketMQ's NameServer knows it only once a broker
  registers it).
- 106 GET_BROKER_CLUSTER_INFO: every group with a remoting port (``brokerAddrTable``,
  ``clusterAddrTable``).
- 206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER: the topics of those brokers.
- 101 GET_KV_CONFIG: 22 QUERY_NOT_FOUND (no KV store).
- 205 WIPE_WRITE_PERM_OF_BROKER / 327 ADD_WRITE_PERM_OF_BROKER (mqadmin wipeWritePerm /
  addWritePerm ``-b NAME``): the group's queues are routed without (with) the write bit, on
  every protocol's routes, until 327 or its master registers a changed topic table
  (``RouteTable.set_write_perm``); header ``wipeTopicCount`` / ``addTopicCount``, the topics
  the group holds (0 for an unknown name), as Apache's DefaultRequestProcessor.

Anything else: 3 REQUEST_CODE_NOT_SUPPORTED (``server.py``). The JSON is built by
``wharf.broker.kit.remoting.routes``, shared with a broker's own answers.
"""

from __future__ import annotations

import logging

from wharf.broker.kit.remoting.codes import RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.broker.kit.remoting.routes import (
    GroupAddresses,
    GroupQueues,
    cluster_info_response,
    kv_config_not_found,
    route_response,
    system_topic_list_response,
    topic_list_response,
    topic_not_exist,
)
from wharf.broker.kit.remoting.server import Connection, Handler, RemotingServer, RemotingStartError
from wharf.broker.namesrv.routes import PERM_WRITE, LiveBroker, RouteTable

__all__ = ["NamesrvRemoting", "RemotingStartError", "reserve"]

log = logging.getLogger("wharf.namesrv")

RETRY_PREFIX = "%RETRY%"  # RocketMQ's MixAll.RETRY_GROUP_TOPIC_PREFIX
RETRY_PERM = 6  # read | write, 1 queue: what a broker makes for %RETRY%<group>
_WILDCARDS = ("", "0.0.0.0", "::")


def reserve(listen: str, fallback_host: str) -> tuple[RemotingServer, str]:
    """Bind ``listen`` (HOST:PORT, port 0: a free port) without listening; returns the server
    and the address clients dial (``fallback_host`` when listening on a wildcard host).
    RemotingStartError when it cannot."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    server = RemotingServer()
    bound = server.reserve(host, int(port))
    advertised = host if host not in _WILDCARDS else fallback_host.strip("[]")
    if advertised in _WILDCARDS:
        advertised = "127.0.0.1"
    return server, f"{advertised}:{bound}"


class NamesrvRemoting:
    """The request table of the NameServer's remoting port over ``table``."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table

    def handlers(self) -> dict[int, Handler]:
        return {
            int(RequestCode.GET_ROUTEINFO_BY_TOPIC): self.get_route,
            int(RequestCode.GET_BROKER_CLUSTER_INFO): self.get_cluster_info,
            int(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER): self.get_topic_list,
            int(RequestCode.GET_KV_CONFIG): self.get_kv_config,
            int(RequestCode.DELETE_TOPIC_IN_NAMESRV): self.delete_topic,
            int(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS): self.get_system_topic_list,
            int(RequestCode.WIPE_WRITE_PERM_OF_BROKER): self.wipe_write_perm,
            int(RequestCode.ADD_WRITE_PERM_OF_BROKER): self.add_write_perm,
        }

    def _reachable(self) -> list[LiveBroker]:
        """The live brokers with a remoting port."""
        return [b for b in self.table.brokers.values() if b.remoting_address]

    def _groups(self, names: set[str] | None = None) -> dict[str, GroupAddresses]:
        """Per group name (all, or ``names``): its brokers' remoting addresses."""
        found: dict[str, dict[int, LiveBroker]] = {}
        for broker in self._reachable():
            if names is None or broker.broker_name in names:
                found.setdefault(broker.broker_name, {})[broker.broker_id] = broker
        return {
            name: GroupAddresses(
                members[min(members)].cluster,  # the master's, else the lowest replica's
                name,
                {i: b.remoting_address for i, b in members.items()},
            )
            for name, members in found.items()
        }

    async def get_route(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        if not topic:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="missing header field topic"
            )
        route = self.table.route(topic)
        if route is None:
            if topic.startswith(RETRY_PREFIX):
                masters = {n: g for n, g in self._groups().items() if 0 in g.addresses}
                if masters:
                    queues = [GroupQueues(n, 1, 1, RETRY_PERM) for n in masters]
                    return route_response(request, masters.values(), queues)
            return topic_not_exist(request, topic)
        groups = self._groups({name for name, _ in route.queues})
        queues = []
        for name, held in route.queues:
            group = groups.get(name)
            if group is None:
                continue  # no broker of the group has a remoting port
            perm = held.perm if 0 in group.addresses else held.perm & ~PERM_WRITE
            queues.append(GroupQueues(name, held.read_queue_nums, held.write_queue_nums, perm))
        if not queues:
            return topic_not_exist(request, topic)
        return route_response(request, [groups[q.broker_name] for q in queues], queues)

    async def get_cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return cluster_info_response(request, self._groups().values())

    async def get_topic_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return topic_list_response(request, (t for b in self._reachable() for t in b.topics))

    async def get_system_topic_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return system_topic_list_response(request, self._groups().values())

    async def get_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return kv_config_not_found(request)

    async def wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._write_perm(conn, request, False, "wipeTopicCount")

    async def add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._write_perm(conn, request, True, "addTopicCount")

    def _write_perm(
        self, conn: Connection, request: RemotingCommand, writable: bool, field: str
    ) -> RemotingCommand:
        name = request.ext_fields.get("brokerName", "")
        if not name:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="missing header field brokerName"
            )
        count = self.table.set_write_perm(name, writable)
        action = "added" if writable else "wiped"
        log.info("%s write perm of broker %s (%d topics), from %s", action, name, count, conn.peer)
        return response_to(request, ResponseCode.SUCCESS, ext_fields={field: str(count)})

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (216): mqadmin deleteTopic's second step (the brokers first:
        they re-register without it). SUCCESS whether or not a broker held it, as RocketMQ."""
        topic = request.ext_fields.get("topic", "")
        if not topic:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="missing header field topic"
            )
        self.table.delete_topic(topic)
        return response_to(request, ResponseCode.SUCCESS)
