"""A remoting connection's replies (wharf.broker.kit.remoting.server ``Connection.send``): the
frames answered in one turn of the event loop go out in one write, in order; a backlog past
OUT_FLUSH_BYTES goes at once; a close writes what was answered before it; nothing is written
to a closing transport."""

from __future__ import annotations

import asyncio
from typing import Any

from wharf.broker.kit.remoting.codes import FLAG_RESPONSE
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand
from wharf.broker.kit.remoting.server import OUT_FLUSH_BYTES, Connection, RemotingServer


class Transport:
    """What the connection calls on a transport, each write kept as the list of its frames."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append([bytes(data)])

    def writelines(self, frames: Any) -> None:
        self.writes.append([bytes(frame) for frame in frames])

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default


def connected() -> tuple[Connection, Transport]:
    conn, transport = Connection(RemotingServer()), Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def reply(opaque: int, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code=0, opaque=opaque, flag=FLAG_RESPONSE, body=body)


def opaques(writes: list[list[bytes]]) -> list[int]:
    decoder = FrameDecoder(1 << 26)
    return [cmd.opaque for cmd in decoder.feed(b"".join(b"".join(w) for w in writes))]


async def test_the_replies_of_one_turn_go_out_in_one_write_in_order() -> None:
    conn, transport = connected()
    for opaque in (7, 3, 5):
        conn.send(reply(opaque))
    assert transport.writes == []  # not one syscall a reply
    await asyncio.sleep(0)
    assert len(transport.writes) == 1
    assert opaques(transport.writes) == [7, 3, 5]
    conn.send(reply(9))  # the next turn's reply: its own write
    await asyncio.sleep(0)
    assert len(transport.writes) == 2
    assert opaques(transport.writes) == [7, 3, 5, 9]


async def test_a_backlog_past_the_bound_is_written_at_once() -> None:
    conn, transport = connected()
    body = b"x" * (OUT_FLUSH_BYTES // 2)  # a large body: its prefix and itself, not copied
    conn.send(reply(1, body))
    assert transport.writes == []
    conn.send(reply(2, body))  # past OUT_FLUSH_BYTES: written now, not at the next turn
    assert [len(frame) for frame in transport.writes[0]][1::2] == [len(body)] * 2  # prefix, body
    await asyncio.sleep(0)  # the turn's flush finds nothing left
    assert len(transport.writes) == 1
    assert opaques(transport.writes) == [1, 2]


async def test_a_close_writes_what_was_answered_before_it() -> None:
    conn, transport = connected()
    conn.send(reply(1))
    conn.close()
    assert transport.closing
    assert opaques(transport.writes) == [1]
    conn.send(reply(2))  # closed: dropped
    await asyncio.sleep(0)
    assert opaques(transport.writes) == [1]


async def test_nothing_is_written_to_a_transport_closing_under_it() -> None:
    conn, transport = connected()
    conn.send(reply(1))
    transport.closing = True  # the peer went away within the turn
    await asyncio.sleep(0)
    assert transport.writes == []
