"""``wharf send``, ``wharf consume``, ``wharf query --key`` and ``wharf view --msg-id``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator

from rich.progress import Progress
from wharf.client.cli.cluster_commands import admin_of, connection_of_args
from wharf.client.cli.group_commands import parse_timestamp
from wharf.client.cli.output import Output, message_dict, message_line, proto_dict
from wharf.client.cli.topic_commands import parse_attributes
from wharf.client.consumer.pull import PullConsumer
from wharf.client.message import MessageQueue, ReceivedMessage, SendResult
from wharf.client.producer import Producer

STDIN_WINDOW = 1024  # stdin lines in flight at once (auto-batched by the producer)


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    send = sub.add_parser(
        "send", help="send a message (argument, --file, or stdin one message per line)"
    )
    send.add_argument("topic")
    send.add_argument("body", nargs="?", help="message body; omit to read stdin line by line")
    send.add_argument("--file", help="send this file's content as one message")
    send.add_argument("--tags")
    send.add_argument("--key", action="append", default=[], dest="keys", help="repeatable")
    send.add_argument("--prop", action="append", metavar="KEY=VALUE", help="user property")
    send.add_argument("--delay-level", type=int, default=0)
    send.add_argument("--queue", type=int, help="queue id (default: the broker picks)")
    send.set_defaults(run=send_command)

    consume = sub.add_parser("consume", help="print messages of a topic")
    consume.add_argument("topic")
    consume.add_argument("--group", default="wharf-cli", help="group for --from committed/--commit")
    consume.add_argument("--tags", default="*", help="tag expression, e.g. 'a || b'")
    consume.add_argument("--queue", type=int, help="only this queue")
    consume.add_argument(
        "--from",
        dest="start",
        type=_start_of,
        default="beginning",
        metavar="{beginning,end,committed,TIME}",
        help="where each queue starts: TIME (epoch ms or ISO 8601, naive = UTC) is the first "
        "message stored at or after it (with --namesrv, on every group's queues)",
    )
    consume.add_argument("--max", type=int, default=0, help="stop after N messages")
    consume.add_argument("--follow", "-f", action="store_true", help="wait for new messages")
    consume.add_argument("--commit", action="store_true", help="commit progress for --group")
    consume.set_defaults(run=consume_command)

    query = sub.add_parser("query", help="find messages by key (topic#key index)")
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)
    query.add_argument("--max", type=int, default=32)
    query.add_argument(
        "--begin-ms", type=parse_timestamp, default=0, help="stored at/after: epoch ms or ISO 8601"
    )
    query.add_argument(
        "--end-ms", type=parse_timestamp, default=0, help="stored before: epoch ms or ISO 8601"
    )
    query.set_defaults(run=query_command)

    view = sub.add_parser("view", help="show one message by id")
    view.add_argument("--msg-id", required=True, help="offset msg id or unique id (UNIQ_KEY)")
    view.add_argument("--topic", default="", help="required for a unique id")
    view.set_defaults(run=view_command)


def _start_of(text: str) -> str | int:
    """``--from``: a named position, or a time in epoch milliseconds."""
    if text in ("beginning", "end", "committed"):
        return text
    try:
        return parse_timestamp(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected beginning, end, committed or a time (epoch ms or ISO 8601), got {text!r}"
        ) from None


def _result_dict(result: SendResult) -> dict[str, object]:
    return {
        "status": result.status.name,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "topic": result.topic,
        "queue_id": result.queue_id,
        "queue_offset": result.queue_offset,
    }


def _print_result(out: Output, result: SendResult) -> None:
    if out.as_json:
        out.data(_result_dict(result))
    else:
        out.line(
            f"{result.status.name} msg_id={result.msg_id} queue={result.queue_id} "
            f"offset={result.queue_offset}"
        )


def _stdin_lines() -> Iterator[str]:
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        if line:
            yield line


async def send_command(args: argparse.Namespace, out: Output) -> int:
    if args.body is not None and args.file:
        raise ValueError("give a body argument or --file, not both")
    options = dict(
        tags=args.tags,
        keys=args.keys,
        properties=parse_attributes(args.prop),
        delay_level=args.delay_level,
        queue_id=args.queue,
    )
    # --namesrv: the sends spread over the topic's broker groups (Producer(namesrv=)).
    async with Producer(connection=connection_of_args(args), group="wharf-cli") as producer:
        if args.file or args.body is not None:
            if args.file:
                body = await asyncio.to_thread(_read_file_blocking, args.file)
            else:
                body = args.body.encode()
            _print_result(out, await producer.send(args.topic, body, **options))
            return 0
        return await _send_stdin(producer, args.topic, options, out)


def _read_file_blocking(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


async def _send_stdin(producer: Producer, topic: str, options: dict, out: Output) -> int:  # type: ignore[type-arg]
    """One message per line; results printed in input order; sends overlap (auto-batching)."""
    pending: list[asyncio.Task[SendResult]] = []
    sent = 0
    show_progress = not out.as_json and sys.stderr.isatty()  # a live bar only for a person
    with Progress(console=out.err_console, transient=True, disable=not show_progress) as progress:
        task_id = progress.add_task("sending", total=None)
        for line in _stdin_lines():
            pending.append(asyncio.ensure_future(producer.send(topic, line, **options)))
            if len(pending) >= STDIN_WINDOW:
                sent += await _drain(pending, out)
                progress.update(task_id, completed=sent)
        sent += await _drain(pending, out)
    if not out.as_json:
        out.err_console.print(f"sent {sent} message(s)", markup=False)
    return 0


async def _drain(pending: list[asyncio.Task[SendResult]], out: Output) -> int:
    try:
        for task in pending:
            _print_result(out, await task)
        return len(pending)
    finally:
        for task in pending:
            task.cancel()
        pending.clear()


async def consume_command(args: argparse.Namespace, out: Output) -> int:
    if args.max < 0:
        raise ValueError("--max must be >= 0")
    # --namesrv: the queues of every group of the cluster, each read from its master.
    async with PullConsumer(connection=connection_of_args(args), group=args.group) as consumer:
        queues = await consumer.queues(args.topic)
        if args.queue is not None:
            queues = [q for q in queues if q.queue_id == args.queue]
            if not queues:
                raise ValueError(f"topic {args.topic} has no queue {args.queue}")
        positions = {q: await _start_position(consumer, q, args.start) for q in queues}
        printed = 0
        while True:
            progressed = False
            for queue in queues:
                result = await consumer.pull(
                    queue, positions[queue], max_messages=64, tag_expression=args.tags
                )
                positions[queue] = result.next_begin_offset
                for msg in result.messages:
                    _print_message(out, msg)
                    printed += 1
                    if args.max and printed >= args.max:
                        positions[queue] = msg.queue_offset + 1
                        await _maybe_commit(consumer, args, positions)
                        return 0
                progressed = progressed or bool(result.messages)
            if not progressed:
                if not args.follow:
                    break
                await _wait_any(consumer, queues, positions, args.tags)
        await _maybe_commit(consumer, args, positions)
    if not out.as_json:
        out.err_console.print(f"{printed} message(s)", markup=False)
    return 0


async def _wait_any(
    consumer: PullConsumer,
    queues: list[MessageQueue],
    positions: dict[MessageQueue, int],
    tags: str,
) -> None:
    """Follow mode: long-poll every queue at once; return when any has news (or 2 s pass)."""
    polls = [
        asyncio.ensure_future(
            consumer.pull(q, positions[q], max_messages=1, max_wait_ms=2000, tag_expression=tags)
        )
        for q in queues
    ]
    try:
        await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)


async def _start_position(consumer: PullConsumer, queue: MessageQueue, start: str | int) -> int:
    if isinstance(start, int):  # SearchOffset on the queue's own broker (group)
        return await consumer.offset_for_time(queue, start)
    low, high = await consumer.bounds(queue)
    if start == "end":
        return high
    if start == "committed":
        committed = await consumer.committed(queue)
        return committed if committed >= 0 else low
    return low


async def _maybe_commit(
    consumer: PullConsumer, args: argparse.Namespace, positions: dict[MessageQueue, int]
) -> None:
    if args.commit:
        for queue, offset in positions.items():
            await consumer.commit(queue, offset)


def _print_message(out: Output, msg: ReceivedMessage) -> None:
    if out.as_json:
        out.data(message_dict(msg))
    else:
        out.line(message_line(msg))


async def query_command(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:  # --namesrv: every group holding the topic, merged
        reply = await admin.query_messages(
            args.topic, args.key, begin_ms=args.begin_ms, end_ms=args.end_ms, max_num=args.max
        )
    messages = [ReceivedMessage.from_view(v) for v in reply.messages]
    if out.as_json:
        out.data([message_dict(m) for m in messages])
    elif not messages:
        out.line(f"no message with key {args.key!r} in {args.topic}")
    else:
        out.table(
            f"Messages with key {args.key!r}",
            ["queue", "offset", "msg id", "tags", "keys", "body"],
            [
                (m.queue_id, m.queue_offset, m.msg_id, m.tags, ",".join(m.keys), m.text()[:60])
                for m in messages
            ],
        )
    return 0


async def view_command(args: argparse.Namespace, out: Output) -> int:
    async with admin_of(args) as admin:  # --namesrv: the first group that has it
        reply = await admin.view_message(args.msg_id, args.topic)
    msg = ReceivedMessage.from_view(reply.message)
    data = message_dict(msg)
    if out.as_json:
        out.data(data)
        return 0
    extra = proto_dict(reply.message)
    data.update({k: extra.get(k) for k in ("born_host", "store_host", "store_size")})
    out.table(f"Message {msg.msg_id}", ["field", "value"], list(data.items()))
    return 0
