"""The replication handshake's authentication (store/ha/auth.py) between real stores on
127.0.0.1: a replica gets the log only by proving the replication account's secret on this
connection, and a replica with an account takes a log only from a master proving it too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from wharf.store.ha import ReplicaLink, auth, frames
from wharf.store.message_store import MessageStore

from tests.store.helpers import msg, small_config, until

ACCOUNT = ("replicator", "s3cret")


def _secret_of(key: str, host: str) -> str:
    if key != ACCOUNT[0]:
        raise PermissionError(f"not authenticated: access key {key!r} is unknown")
    return ACCOUNT[1]


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[MessageStore]:
    store = MessageStore(
        small_config(tmp_path / "m", broker_role="ASYNC_MASTER", ha_listen_port=0),
        replication=ReplicaLink(replica_secret=_secret_of),
    )
    await store.start()
    await store.put("t", 0, [msg("one"), msg("two")])
    yield store
    await store.shutdown()


def _error(replica: MessageStore) -> str:
    ha = replica.role.ha_slave
    assert ha is not None
    return ha.last_error


def _replica(root: Path, port: int, credentials: tuple[str, str]) -> MessageStore:
    config = small_config(root, broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}")
    return MessageStore(config, replication=ReplicaLink(credentials=credentials))


async def test_only_a_replica_proving_the_account_gets_the_log(
    master: MessageStore, tmp_path: Path
) -> None:
    ha = master.ha_master
    assert ha is not None
    good = _replica(tmp_path / "good", ha.port, ACCOUNT)
    wrong = _replica(tmp_path / "wrong", ha.port, (ACCOUNT[0], "guessed"))
    await good.start()
    await wrong.start()
    try:
        await until(
            lambda: good.insides.commit_log.max_offset == master.insides.commit_log.max_offset
        )
        await until(lambda: "haSecretKey does not match" in _error(wrong))
        assert wrong.insides.commit_log.max_offset == 0
        assert ha.refused >= 1 and len(ha.replicas()) == 1
    finally:
        await wrong.shutdown()
        await good.shutdown()


async def _hello_reply(port: int, hello_bytes: Callable[[bytes], bytes]) -> tuple[str, bytes]:
    """Connect, answer the CHALLENGE with ``hello_bytes(challenge)``; the master's answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        kind, challenge = await frames.read_frame(reader)
        assert kind == frames.FrameType.CHALLENGE
        writer.write(hello_bytes(challenge))
        kind, payload = await frames.read_frame(reader)
        with pytest.raises(asyncio.IncompleteReadError):  # and the master hangs up
            await frames.read_frame(reader)
        return kind.name, payload
    finally:
        writer.close()


async def test_an_unsigned_or_replayed_hello_gets_an_error_and_no_log(
    master: MessageStore,
) -> None:
    ha = master.ha_master
    assert ha is not None
    size = master.insides.commit_log.file_size
    unsigned = frames.Hello(size, 0, 1, "C", "b")
    kind, text = await _hello_reply(ha.port, lambda _: frames.encode_hello(unsigned, _zeros))
    assert kind == "ERROR" and b"needs haAccessKey" in text

    # A HELLO proved for one connection's challenge, sent again on another (a replay).
    signed_hello = frames.Hello(size, 0, 1, "C", "b", (), auth.new_nonce(), ACCOUNT[0])
    recorded: list[bytes] = []

    def proved(challenge: bytes) -> bytes:
        if not recorded:
            recorded.append(
                frames.encode_hello(
                    signed_hello, lambda signed: auth.hello_proof(ACCOUNT[1], challenge, signed)
                )
            )
        return recorded[0]

    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    _, challenge = await frames.read_frame(reader)
    writer.write(proved(challenge))
    kind_first, _ = await frames.read_frame(reader)
    writer.close()
    assert kind_first == frames.FrameType.WELCOME  # the genuine one is let in
    kind, text = await _hello_reply(ha.port, proved)
    assert kind == "ERROR" and b"does not match" in text


def _zeros(signed: bytes) -> bytes:
    return bytes(32)


async def test_a_replica_with_an_account_refuses_a_master_that_cannot_prove_it(
    tmp_path: Path,
) -> None:
    # A master without accounts (a stranger at the master's address would be one too).
    open_master = MessageStore(
        small_config(tmp_path / "m", broker_role="ASYNC_MASTER", ha_listen_port=0)
    )
    await open_master.start()
    await open_master.put("t", 0, [msg("one")])
    assert open_master.ha_master is not None
    replica = _replica(tmp_path / "s", open_master.ha_master.port, ACCOUNT)
    await replica.start()
    try:
        await until(lambda: "did not prove" in _error(replica))
        assert replica.insides.commit_log.max_offset == 0
    finally:
        await replica.shutdown()
        await open_master.shutdown()
