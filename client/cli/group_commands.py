"""``wharf group create|list|delete|progress`` and ``wharf offsets reset``."""

from __future__ import annotations

import argparse
import datetime as dt

from wharf.client.cli.cluster_commands import admin_of
from wharf.client.cli.output import Output, fmt_ms, proto_dict
from wharf.v1 import common_pb2


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (naive = UTC)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"timestamp must be epoch milliseconds or ISO 8601, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    group = sub.add_parser("group", help="consumer groups: create, list, progress (lag)")
    gsub = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = gsub.add_parser("create", help="create or update a subscription group")
    create.add_argument("name")
    create.add_argument("--retry-max-times", type=int, default=0, help="default 16")
    create.add_argument("--retry-queues", type=int, default=0, help="default 1")
    create.add_argument(
        "--from", dest="from_where", choices=["LAST", "FIRST", "TIMESTAMP"], default="LAST"
    )
    create.add_argument("--timestamp", help="for --from TIMESTAMP: epoch ms or ISO 8601")
    create.add_argument("--broadcast", action="store_true", help="allow broadcasting consumers")
    order = create.add_mutually_exclusive_group()
    order.add_argument(
        "--fifo",
        dest="fifo",
        action="store_true",
        default=None,
        help="FIFO group (consumeMessageOrderly): RocketMQ 5 consumers get a message group's "
        "messages one at a time, in order (kept by later updates)",
    )
    order.add_argument("--no-fifo", dest="fifo", action="store_false", help="a concurrent group")
    switch = create.add_mutually_exclusive_group()
    switch.add_argument(
        "--disable",
        dest="consume_enable",
        action="store_false",
        default=None,
        help="stop the group's consumers from pulling (kept by later updates)",
    )
    switch.add_argument(
        "--enable", dest="consume_enable", action="store_true", help="let the group consume again"
    )
    create.set_defaults(run=group_create)

    listing = gsub.add_parser("list", help="list subscription groups")
    listing.set_defaults(run=group_list)

    delete = gsub.add_parser("delete", help="delete a subscription group")
    delete.add_argument("name")
    delete.set_defaults(run=group_delete)

    progress = gsub.add_parser("progress", help="offsets and lag per queue")
    progress.add_argument("name")
    progress.add_argument("--topic", default="", help="only this topic")
    progress.set_defaults(run=group_progress)

    offsets = sub.add_parser("offsets", help="consumer offsets")
    osub = offsets.add_subparsers(dest="action", required=True, metavar="ACTION")
    reset = osub.add_parser("reset", help="move a group's offsets to a point in time")
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True)
    reset.add_argument("--timestamp", required=True, help="epoch ms or ISO 8601 (naive = UTC)")
    reset.set_defaults(run=offsets_reset)


_WHERE_NAMES = {
    common_pb2.CONSUME_FROM_LAST_OFFSET: "LAST",
    common_pb2.CONSUME_FROM_FIRST_OFFSET: "FIRST",
    common_pb2.CONSUME_FROM_TIMESTAMP: "TIMESTAMP",
    common_pb2.CONSUME_FROM_WHERE_UNSPECIFIED: "LAST",
}


async def group_create(args: argparse.Namespace, out: Output) -> int:
    timestamp = parse_timestamp(args.timestamp) if args.timestamp else 0
    async with admin_of(args) as admin:
        config = await admin.create_group(
            args.name,
            retry_max_times=args.retry_max_times,
            retry_queue_nums=args.retry_queues,
            consume_from_where=args.from_where,
            consume_timestamp_ms=timestamp,
            consume_broadcast_enable=args.broadcast,
            consume_enable=args.consume_enable,
            fifo=args.fifo,
        )
    if out.as_json:
        out.data(proto_dict(config))
    else:
        out.line(
            f"group {config.group_name} saved: retry_max_times={config.retry_max_times} "
            f"from={_WHERE_NAMES.get(config.consume_from_where, '?')} "
            f"consume={'enabled' if config.consume_enable else 'disabled'} "
            f"fifo={'yes' if config.consume_message_orderly else 'no'}"
        )
    return 0


async def group_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        reply = await admin.list_groups()
    groups = sorted(reply.groups, key=lambda g: g.group_name)
    if out.as_json:
        out.data([proto_dict(g) for g in groups])
        return 0
    out.table(
        "Subscription groups",
        ["group", "consume", "broadcast", "fifo", "retry max", "retry queues", "from"],
        [
            (
                g.group_name,
                "yes" if g.consume_enable else "no",
                "yes" if g.consume_broadcast_enable else "no",
                "yes" if g.consume_message_orderly else "no",
                g.retry_max_times,
                g.retry_queue_nums,
                _WHERE_NAMES.get(g.consume_from_where, "?"),
            )
            for g in groups
        ],
    )
    return 0


async def group_delete(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        await admin.delete_group(args.name)
    if out.as_json:
        out.data({"deleted": args.name})
    else:
        out.line(f"group {args.name} deleted")
    return 0


async def group_progress(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        reply = await admin.consumer_progress(args.name, args.topic)
    if out.as_json:
        out.data(proto_dict(reply))
        return 0
    out.table(
        f"Group {reply.consumer_group}: total lag {reply.total_lag}, "
        f"{reply.online_clients} online client(s)",
        [
            "broker",
            "topic",
            "queue",
            "broker offset",
            "consumer offset",
            "lag",
            "last consumed (UTC)",
        ],
        [
            (
                q.broker_name or "-",
                q.topic,
                q.queue_id,
                q.broker_offset,
                q.consumer_offset,
                q.lag,
                fmt_ms(q.last_timestamp),
            )
            for q in sorted(reply.queues, key=lambda q: (q.broker_name, q.topic, q.queue_id))
        ],
    )
    return 0


async def offsets_reset(args: argparse.Namespace, out: Output) -> int:
    timestamp = parse_timestamp(args.timestamp)
    data: dict[str, object] = {"group": args.group, "topic": args.topic, "timestamp": timestamp}
    async with admin_of(args) as admin:
        if args.namesrv:  # one entry per (broker group, queue): queue ids repeat across groups
            entries = await admin.reset_offsets_by_queue(args.group, args.topic, timestamp)
            rows = [(e.broker_name, e.queue_id, e.offset) for e in entries]
            data["queue_offsets"] = [{"broker": b, "queue": q, "offset": o} for b, q, o in rows]
        else:
            reply = await admin.reset_offsets(args.group, args.topic, timestamp)
            offsets = dict(sorted(reply.offsets.items()))
            rows = [("-", q, o) for q, o in offsets.items()]
            data["offsets"] = {str(k): v for k, v in offsets.items()}
    if out.as_json:
        out.data(data)
        return 0
    out.table(
        f"Offsets of {args.group} on {args.topic} reset to {fmt_ms(timestamp)}",
        ["broker", "queue", "new offset"],
        rows,
    )
    return 0
