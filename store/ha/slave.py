"""HASlave: a replica's side of replication (RocketMQ's HAClient), on asyncio streams.

The replica dials its master's HA address (``haMasterAddress``, or what ``master_address()``
returns: the broker may learn it from the NameServer), answers its CHALLENGE with the proof of
its replication account when it has one (``credentials``; then the master's WELCOME must prove
the same account's secret, else the replica hangs up: ``auth.py``), says where its log ends
(HELLO) and then
only appends what the master sends, byte for byte (``CommitLog.append_raw``: same segments,
same blank tails), so its CommitLog is a copy of the master's; its ConsumeQueues and IndexFiles
are built by its own dispatch. It reports its written and flushed ends after every append, and
every ``haSendHeartbeatInterval`` (5 s), and again once a sync covers the appends: a
SYNC_FLUSH master acknowledges on the flushed end (``master.py``). So every replica syncs what
it receives promptly, whatever its own flushDiskType (which rules the acknowledgements of its
own writes once elected): a SYNC_FLUSH one joins its group commit, an ASYNC_FLUSH one syncs
after each append, one sync at a time (an ASYNC_FLUSH master's replica syncs sooner than its
master needs: fdatasync runs in a thread, off the receive path). The log is synced before
HELLO too: the end it announces counts as acknowledged. Metadata frames go to
``apply_metadata`` (the broker replaces its topics, groups and consumer offsets with the
master's: a replica never keeps offsets of its own that a master would later overwrite,
RocketMQ #1094); each is followed by a REPORT, and every REPORT counts the frames applied on
the connection, so the master knows when a change reached this replica (``metadata.py``).

Failures: an ERROR at the handshake (another segment size, a log that does not continue the
master's) is logged with the master's advice and retried every ``RETRY_REFUSED_S`` (30 s: it
needs an operator); a broken connection, a master silent for ``haHousekeepingInterval``
(20 s) or bytes that do not continue this log close the connection and redial after
``RETRY_S`` (1 s). A disk-full append closes too (nothing half written: ``append_raw`` writes
a frame whole or not at all) and redials after the same second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

from wharf.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    OFFSET_STORE_TIMESTAMP,
    STORE_TIMESTAMP,
)
from wharf.store.config import StoreConfig
from wharf.store.errors import ReplicationError, StoreNotWritableError
from wharf.store.ha import auth, frames
from wharf.store.ha.epochs import Epochs
from wharf.store.log.commit_log import CommitLog

log = logging.getLogger(__name__)

RETRY_S = 1.0
RETRY_REFUSED_S = 30.0
CONNECT_TIMEOUT_S = 5.0


class HASlave:
    def __init__(
        self,
        commit_log: CommitLog,
        config: StoreConfig,
        identity: tuple[str, str, int],
        master_address: Callable[[], str],
        on_appended: Callable[[], None],
        apply_metadata: Callable[[bytes], None] | None = None,
        *,
        epochs: Callable[[], Epochs] = list,
        on_epochs: Callable[[Epochs], Awaitable[None]] | None = None,
        on_agreed: Callable[[], None] | None = None,
        on_truncate: Callable[[int], Awaitable[None]] | None = None,
        on_committed: Callable[[], None] | None = None,
        credentials: tuple[str, str] = ("", ""),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``identity``: (cluster, broker name, broker id) sent in HELLO; ``master_address()``:
        'host:port' of the master's HA listener, '' while unknown; ``on_appended()`` after
        every append (the facade wakes dispatch and the flush); ``credentials``: (access key,
        secret) of the replication account, ('', '') = none; ``ssl_context``: dial over TLS
        (haTlsEnable; the master's certificate must match its host), None = plain TCP."""
        self._log = commit_log
        self._config = config
        self._identity = identity
        self._master_address = master_address
        self._on_appended = on_appended
        self._apply_metadata = apply_metadata
        self._epochs = epochs
        self._on_epochs = on_epochs
        self._on_agreed = on_agreed  # after a handshake found this log a prefix of the master's
        self._on_truncate = on_truncate
        self._on_committed = on_committed  # the master's committed offset grew
        self._credentials = credentials
        self._ssl = ssl_context
        self._task: asyncio.Task[None] | None = None
        self._session_task: asyncio.Task[float] | None = None
        self.connected_to = ""  # the master's HA address while connected
        # The master's committed offset (HAMaster.committed_offset), from its last frame:
        # this replica's reads stop there (store/role.py).
        self.confirm_offset = 0
        self.master_max_offset = 0  # the master's log end, from the handshake
        self.last_frame_at = 0.0  # time.time() of the master's last frame
        self._sync_flush = config.flush_disk_type == "SYNC_FLUSH"
        self._appended = asyncio.Event()  # wakes the flushed-end reporter
        self._metadata_applied = 0  # METADATA frames applied on this connection
        self.connections = 0
        self.last_error = ""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha-slave")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def lag_bytes(self) -> int:
        """How far this replica's log is behind the master's end as last heard of."""
        return max(0, max(self.master_max_offset, self.confirm_offset) - self._log.max_offset)

    def redial(self) -> None:
        """The master moved (controller mode): drop the connection, dial ``master_address()``."""
        session = self._session_task
        if session is not None and not session.done():
            session.cancel()

    async def _run(self) -> None:
        while True:
            address = self._master_address()
            if not address:
                await asyncio.sleep(RETRY_S)
                continue
            pause = RETRY_S
            self._session_task = asyncio.create_task(self._session(address))
            try:
                pause = await self._session_task
            except asyncio.CancelledError:
                if self._session_task.cancelled() and not _current_cancelling():
                    log.info("replication from %s dropped: the master moved", address)
                    pause = 0.0
                else:
                    raise
            except (OSError, asyncio.IncompleteReadError, frames.ProtocolError) as exc:
                self._failed(address, f"{type(exc).__name__}: {exc}")
            except TimeoutError:
                self._failed(address, "the master was silent for haHousekeepingInterval")
            except (ReplicationError, StoreNotWritableError) as exc:
                self._failed(address, str(exc))
            finally:
                self.connected_to = ""
            await asyncio.sleep(pause)

    def _failed(self, address: str, reason: str) -> None:
        if reason != self.last_error:
            log.warning("replication from %s stopped: %s; redialling", address, reason)
        self.last_error = reason

    async def _session(self, address: str) -> float:
        """One connection; returns how long to wait before the next."""
        host, _, port = address.rpartition(":")
        hostname = host.strip("[]") if self._ssl else None
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=self._ssl, server_hostname=hostname
            )
        try:
            timeout = self._config.ha_housekeeping_interval / 1000
            welcome = await self._handshake(reader, writer, address, timeout)
            if welcome is None:
                return RETRY_REFUSED_S
            if welcome.start_offset < self._log.max_offset:
                if self._on_truncate is None:
                    raise ReplicationError(
                        f"the master continues at {welcome.start_offset}, before this log's end "
                        f"{self._log.max_offset}, and this replica cannot truncate"
                    )
                log.warning("this log diverged from the master's at %d (it ends at %d): "
                            "truncating", welcome.start_offset, self._log.max_offset)  # fmt: skip
                await self._on_truncate(welcome.start_offset)
                return RETRY_REFUSED_S
            if welcome.epochs and self._on_epochs is not None:
                await self._on_epochs(list(welcome.epochs))
            self.master_max_offset = welcome.max_offset
            self.confirm_offset = welcome.confirm_offset
            if self._on_agreed is not None:
                self._on_agreed()
            self.connected_to = address
            self._metadata_applied = 0
            self.connections += 1
            self.last_error = ""
            log.info("replicating from %s at offset %d (master log [%d, %d])", address,
                     welcome.start_offset, welcome.min_offset, welcome.max_offset)  # fmt: skip
            reporters = [
                asyncio.create_task(self._report_loop(writer)),
                asyncio.create_task(self._flushed_report_loop(writer)),
            ]
            try:
                await self._receive(reader, writer, timeout)
            finally:
                for reporter in reporters:
                    reporter.cancel()
                for reporter in reporters:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await reporter
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        return RETRY_S

    async def _handshake(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        address: str,
        silence_s: float,
    ) -> frames.Welcome | None:
        """CHALLENGE, HELLO, WELCOME; None when refused either way (``last_error`` says why:
        it needs an operator, so the caller waits ``RETRY_REFUSED_S``)."""
        async with asyncio.timeout(silence_s):
            kind, payload = await frames.read_frame(reader)
        if kind != frames.FrameType.CHALLENGE:
            raise frames.ProtocolError(f"expected CHALLENGE, got {kind.name}")
        challenge = frames.decode_challenge(payload)
        cluster, name, broker_id = self._identity
        access_key, secret = self._credentials
        await self._log.flush()  # the end HELLO announces counts as acknowledged: durable first
        hello = frames.Hello(
            self._log.file_size,
            self._log.max_offset,
            broker_id,
            cluster,
            name,
            tuple(self._epochs()),
            auth.new_nonce(),
            access_key,
        )
        writer.write(frames.encode_hello(hello, lambda b: auth.hello_proof(secret, challenge, b)))
        await writer.drain()
        async with asyncio.timeout(silence_s):
            kind, payload = await frames.read_frame(reader)
        if kind == frames.FrameType.ERROR:
            self._refused(f"the master at {address} refuses this replica: "
                          f"{payload.decode('utf-8', 'replace')}")  # fmt: skip
            return None
        if kind != frames.FrameType.WELCOME:
            raise frames.ProtocolError(f"expected WELCOME, got {kind.name}")
        welcome, signed, proof = frames.decode_welcome(payload)
        if secret and not auth.matches(
            auth.welcome_proof(secret, hello.nonce, challenge, signed), proof
        ):
            self._refused(
                f"the master at {address} did not prove the secret of replication account "
                f"{access_key!r} (haAccessKey): is aclEnable on there, with that account?"
            )
            return None
        return welcome

    def _refused(self, reason: str) -> None:
        if reason != self.last_error:
            log.error("%s", reason)
        self.last_error = reason

    async def _receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, silence_s: float
    ) -> None:
        commit_log = self._log
        while True:
            async with asyncio.timeout(silence_s):
                kind, payload = await frames.read_frame(reader)
            self.last_frame_at = time.time()
            if kind == frames.FrameType.DATA:
                offset, confirm, data = frames.decode_data(memoryview(payload))
                grew = confirm > self.confirm_offset
                self.confirm_offset = confirm
                self.master_max_offset = max(self.master_max_offset, confirm)
                if not data:
                    if grew and self._on_committed is not None:
                        self._on_committed()  # dispatch may go on to it
                    continue  # heartbeat
                commit_log.append_raw(offset, data, _store_timestamp(data))
            elif kind == frames.FrameType.BLANK:
                commit_log.append_blank_raw(frames.decode_offset(payload))
            elif kind == frames.FrameType.METADATA:
                if self._apply_metadata is not None:
                    self._apply_metadata(payload)
                self._metadata_applied += 1
                self._report(writer)  # the master may be holding an answer for it
                await writer.drain()
                continue
            else:
                raise frames.ProtocolError(f"unexpected {kind.name} from the master")
            self._on_appended()
            self._appended.set()
            self._report(writer)
            await writer.drain()

    async def _flushed_report_loop(self, writer: asyncio.StreamWriter) -> None:
        """Report the flushed end once a sync covers the appends: the group commit
        ``on_appended`` requested (SYNC_FLUSH), else a sync of its own. One at a time: appends
        meanwhile go with the next, as a group commit's writers do."""
        commit_log = self._log
        while True:
            await self._appended.wait()
            self._appended.clear()
            end = commit_log.max_offset
            if commit_log.flushed_offset < end:
                try:
                    if self._sync_flush:
                        await commit_log.wait_flushed(end)
                    else:
                        await commit_log.flush()
                except StoreNotWritableError as exc:  # sticky: nothing more gets durable here
                    self._failed(self.connected_to, f"no more flushed reports: {exc}")
                    return
            self._report(writer)
            await writer.drain()

    async def _report_loop(self, writer: asyncio.StreamWriter) -> None:
        interval = self._config.ha_send_heartbeat_interval / 1000
        while True:
            await asyncio.sleep(interval)
            self._report(writer)
            await writer.drain()

    def _report(self, writer: asyncio.StreamWriter) -> None:
        commit_log = self._log
        writer.write(
            frames.encode_report(
                commit_log.max_offset, commit_log.flushed_offset, self._metadata_applied
            )
        )


def _store_timestamp(data: memoryview) -> int:
    """STORETIMESTAMP of the first record in ``data`` (0 if it is no message record): kept as
    the segment's time for retention; older than the chunk's last record, so never late."""
    if len(data) < OFFSET_STORE_TIMESTAMP + 8:
        return 0
    if int.from_bytes(data[4:8], "big") not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return 0
    return int(STORE_TIMESTAMP.unpack_from(data, OFFSET_STORE_TIMESTAMP)[0])


def _current_cancelling() -> int:
    """Whether this task itself is being cancelled (stop()), not only the session it awaits."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0
