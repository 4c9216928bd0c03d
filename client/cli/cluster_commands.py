"""``wharf cluster list``: the live brokers the NameServers know (global ``--namesrv``)."""

from __future__ import annotations

import argparse

from wharf.client.admin import Admin
from wharf.client.cli.output import Output, proto_dict
from wharf.client.cluster_admin import ClusterAdmin
from wharf.client.errors import InvalidArgumentError
from wharf.client.namesrv import NameServerClient


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = sub.add_parser("cluster", help="the brokers of a cluster (needs --namesrv)")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = csub.add_parser("list", help="live brokers: cluster, broker name, id, address, role")
    listing.set_defaults(run=cluster_list)


def need_namesrv(args: argparse.Namespace) -> None:
    if not args.namesrv:
        raise InvalidArgumentError(
            "this command needs --namesrv HOST:PORT[;HOST:PORT] (env NAMESRV_ADDR)"
        )


def namesrv_of(args: argparse.Namespace) -> NameServerClient:
    need_namesrv(args)
    tls = args.connect["tls"] if args.namesrv_tls else None  # keys: the environment's
    return NameServerClient(args.namesrv, tls=tls)


def admin_of(args: argparse.Namespace, cluster: str | None = None) -> Admin:
    """The admin client of a command: ``--endpoints``'s broker, or with ``--namesrv`` every
    master of the cluster (``ClusterAdmin``: writes on each group, reads merged)."""
    if args.namesrv:
        return ClusterAdmin(
            namesrv=args.namesrv, namesrv_tls=args.namesrv_tls, cluster=cluster, **args.connect
        )
    return Admin(args.endpoints, **args.connect)


async def cluster_list(args: argparse.Namespace, out: Output) -> int:
    async with namesrv_of(args) as namesrv:
        brokers = await namesrv.cluster_info()
    rows = [{**proto_dict(b), "role": "MASTER" if b.broker_id == 0 else "SLAVE"} for b in brokers]
    if out.as_json:
        out.data(rows)
        return 0
    out.table(
        "Brokers",
        ["cluster", "broker", "id", "address", "role", "topics", "last seen (ms ago)"],
        [
            (b.cluster, b.broker_name, b.broker_id, b.address, r["role"], b.topics,
             b.last_seen_ms_ago)
            for b, r in zip(brokers, rows, strict=True)
        ],
    )  # fmt: skip
    return 0
