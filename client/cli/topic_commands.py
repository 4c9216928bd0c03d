"""``wharf topic create|update|delete|list|status`` and ``wharf broker status``."""

from __future__ import annotations

import argparse

from wharf.client.admin import Admin, page_topics
from wharf.client.cli.cluster_commands import admin_of, connection_of_args, need_namesrv
from wharf.client.cli.output import Output, fmt_ms, proto_dict
from wharf.client.cluster_admin import ClusterAdmin

PERM_NAMES = {6: "RW", 4: "R", 2: "W", 0: "-"}
TABLE_ROWS = 500  # `topic list`'s page in a table (rich: ~1 ms a row)
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")  # RocketMQ 5's TopicMessageType


def topic_attributes(args: argparse.Namespace) -> dict[str, str]:
    """--attr KEY=VALUE pairs, with --message-type as the ``message.type`` attribute."""
    attributes = parse_attributes(args.attr)
    if args.message_type:
        attributes["message.type"] = args.message_type
    return attributes


def parse_attributes(items: list[str] | None) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--attr expects KEY=VALUE, got {item!r}")
        attributes[key] = value
    return attributes


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topic = sub.add_parser("topic", help="create, update, delete, list and inspect topics")
    tsub = topic.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = tsub.add_parser("create", help="create a topic (exit 5 if it exists)")
    create.add_argument("name")
    create.add_argument("--queues", type=int, default=0, help="read and write queues (default 8)")
    create.add_argument("--read-queues", type=int)
    create.add_argument("--write-queues", type=int)
    create.add_argument("--perm", type=int, default=0, help="6 read-write, 4 read, 2 write")
    create.add_argument(
        "--attr",
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="a topic attribute; Kafka's topic configs too (--config cleanup.policy=compact, "
        "retention.ms, retention.bytes, segment.ms, min.cleanable.dirty.ratio, "
        "min.compaction.lag.ms, max.compaction.lag.ms, delete.retention.ms)",
    )
    create.add_argument(
        "--message-type",
        type=str.upper,
        choices=MESSAGE_TYPES,
        help="RocketMQ 5's message.type attribute: what RocketMQ 5 producers may send to it",
    )
    where = create.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster", help="create it on every master of this cluster (needs --namesrv)"
    )
    where.add_argument("--broker", help="create it on this broker group's master (needs --namesrv)")
    create.set_defaults(run=topic_create)

    update = tsub.add_parser("update", help="change queue counts, permission or attributes")
    update.add_argument("name")
    update.add_argument("--read-queues", type=int)
    update.add_argument("--write-queues", type=int)
    update.add_argument("--perm", type=int)
    update.add_argument(
        "--attr", "--config", action="append", metavar="KEY=VALUE", help="as for create"
    )
    update.add_argument("--message-type", type=str.upper, choices=MESSAGE_TYPES)
    update.set_defaults(run=topic_update)

    delete = tsub.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(run=topic_delete)

    listing = tsub.add_parser(
        "list",
        help="list topics",
        description="List topics sorted by name. The table shows a page of --limit topics "
        f"({TABLE_ROWS} by default) and how to get the next one; --json lists them all "
        "unless --limit is given.",
    )
    listing.add_argument("--system", action="store_true", help="include %%RETRY%%, %%DLQ%% ...")
    listing.add_argument("--prefix", default="", help="only topics whose name starts with this")
    listing.add_argument(
        "--after", default="", metavar="NAME", help="the page after this name (the last shown)"
    )
    listing.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"at most this many topics (0: all; default {TABLE_ROWS} in the table, all in --json)",
    )
    listing.set_defaults(run=topic_list)

    status = tsub.add_parser("status", help="min/max offset and last update per queue")
    status.add_argument("name")
    status.set_defaults(run=topic_status)

    route = tsub.add_parser("route", help="queues, permission and endpoint of each broker group")
    route.add_argument("name")
    route.set_defaults(run=topic_route)

    broker = sub.add_parser("broker", help="broker information")
    bsub = broker.add_subparsers(dest="action", required=True, metavar="ACTION")
    bstatus = bsub.add_parser("status", help="version, flush mode, store figures")
    bstatus.set_defaults(run=broker_status)


async def topic_create(args: argparse.Namespace, out: Output) -> int:
    if args.cluster or args.broker or args.namesrv:
        return await _create_on_masters(args, out)
    async with Admin(connection=connection_of_args(args)) as admin:
        config = await _create(admin, args)
    _print_topic(out, config, "created")
    return 0


async def _create(admin: Admin, args: argparse.Namespace) -> object:
    return await admin.create_topic(
        args.name,
        queue_nums=args.queues,
        read_queue_nums=args.read_queues,
        write_queue_nums=args.write_queues,
        perm=args.perm,
        attributes=topic_attributes(args),
    )


async def _create_on_masters(args: argparse.Namespace, out: Output) -> int:
    """RocketMQ's ``updateTopic -c CLUSTER`` / ``-b BROKER``: the topic on every master of the
    cluster (all clusters the NameServers know without either), or on one group's master; a
    master that has it already counts as done."""
    need_namesrv(args)  # --cluster / --broker
    async with admin_of(args, args.cluster) as admin:
        assert isinstance(admin, ClusterAdmin)
        made = await admin.create_topic_on_masters(
            args.name,
            broker=args.broker,
            queue_nums=args.queues,
            read_queue_nums=args.read_queues,
            write_queue_nums=args.write_queues,
            perm=args.perm,
            attributes=topic_attributes(args),
        )
    created = [{"broker": n, "address": a, "created": c is not None} for n, a, c in made]
    if out.as_json:
        out.data({"topic": args.name, "brokers": created})
    else:
        for c in created:
            verb = "created" if c["created"] else "exists already"
            out.line(f"topic {args.name} {verb} on {c['broker']} ({c['address']})")
    return 0


async def topic_update(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        config = await admin.update_topic(
            args.name,
            read_queue_nums=args.read_queues,
            write_queue_nums=args.write_queues,
            perm=args.perm,
            attributes=topic_attributes(args),
        )
    _print_topic(out, config, "updated")
    return 0


def _print_topic(out: Output, config: object, verb: str) -> None:
    data = proto_dict(config)  # type: ignore[arg-type]
    if out.as_json:
        out.data(data)
    else:
        out.line(
            f"topic {data['name']} {verb}: read_queues={data['read_queue_nums']} "
            f"write_queues={data['write_queue_nums']} perm={PERM_NAMES.get(data['perm'], data['perm'])}"
        )


async def topic_delete(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        await admin.delete_topic(args.name)
    if out.as_json:
        out.data({"deleted": args.name})
    else:
        out.line(f"topic {args.name} deleted")
    return 0


async def topic_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:  # (a cluster's ClusterAdmin too: paged here)
        reply = await admin.list_topics(include_system=args.system)
    matching = page_topics(reply, prefix=args.prefix, after=args.after).topics
    limit = args.limit if args.limit is not None else 0 if out.as_json else TABLE_ROWS
    topics = matching[:limit] if limit > 0 else matching
    if out.as_json:
        out.data([proto_dict(t) for t in topics])
        return 0
    out.table(
        "Topics",
        ["name", "read queues", "write queues", "perm", "attributes"],
        [
            (
                t.name,
                t.read_queue_nums,
                t.write_queue_nums,
                PERM_NAMES.get(t.perm, t.perm),
                ",".join(f"{k}={v}" for k, v in sorted(t.attributes.items())),
            )
            for t in topics
        ],
    )
    if len(topics) < len(matching):  # a table of 25,000 rows takes rich ~30 s to print
        out.line(
            f"{len(topics)} of {len(matching)} topics; the next page: --after {topics[-1].name}"
            "; all of them: --limit 0 (or --json), fewer: --prefix"
        )
    return 0


async def topic_status(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        stats = await admin.topic_stats(args.name)
    if out.as_json:
        out.data(proto_dict(stats))
        return 0
    out.table(
        f"Topic {stats.name}: {stats.total_messages} messages",
        ["broker", "queue", "min offset", "max offset", "last update (UTC)"],
        [
            (q.broker_name or "-", q.queue_id, q.min_offset, q.max_offset,
             fmt_ms(q.last_update_timestamp))
            for q in sorted(stats.queues, key=lambda q: (q.broker_name, q.queue_id))
        ],
    )  # fmt: skip
    return 0


async def topic_route(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        routes = await admin.topic_routes(args.name)
    if out.as_json:
        out.data([proto_dict(r) for r in routes])
        return 0
    out.table(
        f"Route of {args.name}",
        ["broker", "endpoint", "read queues", "write queues", "perm"],
        [
            (r.broker_name, r.endpoint, r.read_queue_nums, r.write_queue_nums,
             PERM_NAMES.get(r.perm, r.perm))
            for r in routes
        ],
    )  # fmt: skip
    return 0


async def broker_status(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:
        statuses = await admin.broker_statuses()
    if out.as_json:
        docs = [proto_dict(s) for s in statuses]
        out.data(docs if args.namesrv else docs[0])
        return 0
    for status in statuses:
        data = proto_dict(status)
        runtime = data.pop("runtime", {}) or {}
        rows = [(k, v) for k, v in data.items()] + [(f"runtime.{k}", v) for k, v in runtime.items()]
        out.table(f"Broker {status.broker_name or status.endpoint}", ["field", "value"], rows)
    return 0
