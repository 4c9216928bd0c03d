"""``wharf cluster list``: the live brokers the NameServers know (global ``--namesrv``), each
with its own account of its role and replication (BrokerStatus, asked in parallel); ``wharf
admin transfer-master``."""

from __future__ import annotations

import argparse
import asyncio

from wharf.client.admin import Admin
from wharf.client.cli.output import Output, proto_dict
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.connection import Connection
from wharf.client.errors import InvalidArgumentError, NotFoundError, WharfError
from wharf.client.namesrv import NameServerClient
from wharf.v1 import admin_pb2

STATUS_TIMEOUT_S = 2.0


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = sub.add_parser("cluster", help="the brokers of a cluster (needs --namesrv)")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = csub.add_parser("list", help="live brokers: cluster, broker name, id, address, role")
    listing.set_defaults(run=cluster_list)
    add_admin_parsers(sub)


def add_admin_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    admin = sub.add_parser("admin", help="group administration (controller mode)")
    asub = admin.add_subparsers(dest="action", required=True, metavar="ACTION")
    transfer = asub.add_parser(
        "transfer-master",
        help="hand a broker group to an in-sync replica (send to the master: --endpoints, or "
        "--namesrv with --broker NAME)",
    )
    transfer.add_argument("--to", type=int, default=0, help="replica id (default: any in sync)")
    transfer.add_argument("--broker", default="", help="the group, with --namesrv")
    transfer.set_defaults(run=transfer_master)


async def transfer_master(args: argparse.Namespace, out: Output) -> int:
    endpoint = args.endpoints
    if args.namesrv:
        if not args.broker:
            raise InvalidArgumentError("with --namesrv, name the group: --broker NAME")
        async with namesrv_of(args) as namesrv:
            endpoint = (await namesrv.masters()).get(args.broker, "")
        if not endpoint:
            raise NotFoundError(f"broker group {args.broker!r} has no live master")
    async with Admin(connection=connection_of_args(args).to(endpoint)) as admin:
        reply = await admin.transfer_master(args.to)
    if out.as_json:
        out.data(proto_dict(reply))
    else:
        out.line(f"replica {reply.new_master_id} is the master now (term {reply.epoch})")
    return 0


def need_namesrv(args: argparse.Namespace) -> None:
    if not args.namesrv:
        raise InvalidArgumentError(
            "this command needs --namesrv HOST:PORT[;HOST:PORT] (env NAMESRV_ADDR)"
        )


def connection_of_args(args: argparse.Namespace) -> Connection:
    """The command's Connection, built once by ``main`` from the global options
    (``args.connection``); a namespace made without it (a script calling a command) gives
    ``endpoints``, ``namesrv`` and ``connect`` (Connection keyword arguments) instead."""
    connection = getattr(args, "connection", None)
    if connection is None:
        connection = args.connection = Connection.build(
            args.endpoints, namesrv=getattr(args, "namesrv", None), **getattr(args, "connect", {})
        )
    assert isinstance(connection, Connection)
    return connection


def namesrv_of(args: argparse.Namespace) -> NameServerClient:
    need_namesrv(args)
    return NameServerClient.of(connection_of_args(args))


def admin_of(args: argparse.Namespace, cluster: str | None = None) -> Admin | ClusterAdmin:
    """The admin client of a command: ``--endpoints``'s broker, or with ``--namesrv`` every
    master of the cluster (``ClusterAdmin``: writes on each group, reads merged)."""
    connection = connection_of_args(args)
    if connection.namesrv:
        return ClusterAdmin(connection=connection, cluster=cluster)
    return Admin(connection=connection)


async def cluster_list(args: argparse.Namespace, out: Output) -> int:
    async with namesrv_of(args) as namesrv:
        brokers = await namesrv.cluster_info()
    replication = await asyncio.gather(*(_replication(args, b.address) for b in brokers))
    rows = []
    for broker, rep in zip(brokers, replication, strict=True):
        row = {**proto_dict(broker), "role": "MASTER" if broker.broker_id == 0 else "SLAVE"}
        if rep is not None:
            row["broker_role"] = rep.role
            row["replication"] = proto_dict(rep)
        rows.append(row)
    if out.as_json:
        out.data(rows)
        return 0
    out.table(
        "Brokers",
        ["cluster", "broker", "id", "address", "role", "topics", "last seen (ms ago)",
         "replication"],
        [
            (b.cluster, b.broker_name, b.broker_id, b.address, r.get("broker_role", r["role"]),
             b.topics, b.last_seen_ms_ago, _describe(rep))
            for b, r, rep in zip(brokers, rows, replication, strict=True)
        ],
    )  # fmt: skip
    return 0


async def _replication(args: argparse.Namespace, address: str) -> admin_pb2.Replication | None:
    """The broker's own account of its role and replicas (None if it does not answer in 2 s:
    the NameServer's listing still shows it)."""
    try:
        async with Admin(connection=connection_of_args(args).to(address)) as admin:
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                status = await admin.broker_status()
    except (WharfError, TimeoutError):
        return None
    return status.replication


def _describe(rep: admin_pb2.Replication | None) -> str:
    """One cell: a master's replicas with their lag, or a replica's link to its master."""
    if rep is None:
        return "?"
    term = f"term {rep.epoch}, " if rep.epoch else ""
    if rep.role == "SLAVE":
        link = f"from {rep.master_ha_address}" if rep.master_ha_address else "master unreachable"
        return f"{term}{link}, {rep.lag_bytes} B behind"
    sss = f"sync-state set {list(rep.sync_state_set)}, " if rep.sync_state_set else ""
    if not rep.replicas:
        return f"{term}{sss}no replicas"
    return (
        term
        + sss
        + ", ".join(
            f"id {r.broker_id}: {r.lag_bytes} B / {r.lag_seconds:.1f} s behind"
            f"{' (in sync)' if r.in_sync else ''}"
            for r in rep.replicas
        )
    )
