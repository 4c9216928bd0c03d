"""``wharf tx list|commit|rollback``: transactional (half) messages not yet resolved, and their
resolution by hand (an operator's answer for a producer that will never check back).

With ``--namesrv`` the list covers every master (a ``broker`` column: transaction ids are per
broker), and ``commit`` / ``rollback`` name the broker with ``--broker`` (needed when the
cluster has more than one master)."""

from __future__ import annotations

import argparse

from wharf.client.cli.cluster_commands import admin_of
from wharf.client.cli.output import Output, fmt_ms, proto_dict
from wharf.client.cluster_admin import ClusterAdmin


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tx = sub.add_parser("tx", help="transactional messages: list open ones, resolve by hand")
    tsub = tx.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = tsub.add_parser("list", help="half messages not yet committed or rolled back")
    listing.add_argument("--topic", default="", help="only this topic")
    listing.set_defaults(run=tx_list)
    for action, commit in (("commit", True), ("rollback", False)):
        resolve = tsub.add_parser(action, help=f"{action} an open half message (exit 4: not open)")
        resolve.add_argument("transaction_id", help="from `wharf tx list`")
        resolve.add_argument("--broker", help="with --namesrv: the broker holding it (tx list)")
        resolve.set_defaults(run=tx_resolve, commit=commit)


async def tx_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        reply = await admin.list_half_messages(args.topic)
    if out.as_json:
        out.data([proto_dict(m) for m in reply.messages])
        return 0
    out.table(
        "Open transactions",
        ["broker", "transaction id", "topic", "message id", "stored", "check-backs"],
        [
            (
                m.broker_name or "-",
                m.transaction_id,
                m.topic,
                m.msg_id,
                fmt_ms(m.store_timestamp),
                m.checks,
            )
            for m in reply.messages
        ],
    )
    return 0


async def tx_resolve(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        if isinstance(admin, ClusterAdmin):
            resolution = await admin.resolve_half_message(
                args.transaction_id, args.commit, broker=args.broker
            )
        else:
            resolution = await admin.resolve_half_message(args.transaction_id, args.commit)
    if out.as_json:
        out.data({"transaction_id": args.transaction_id, "resolution": resolution})
    else:
        out.line(f"transaction {args.transaction_id} {resolution}")
    return 0
