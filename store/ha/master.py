"""HAMaster: the master's side of replication (RocketMQ's HAService + HAConnection + the
acknowledgement part of GroupTransferService), on asyncio streams.

One listener on ``haListenHost:haListenPort``; per connected replica, a sender task and the
connection's reader. Frames and the conversation: ``frames.py``.

- **Handshake.** The master challenges (CHALLENGE); with ``replica_secret`` (the broker's ACL)
  the replica's HELLO must carry the proof of an account it accepts, else ERROR and close
  (``auth.py``), and WELCOME carries the master's proof back. The replica says where its log
  ends (HELLO). It continues there if that is a
  record boundary inside this log; an empty replica starts at this log's oldest offset. A
  replica that ends past this log's end, or before its oldest data, or with another segment
  size gets ERROR with what to do (empty the replica's store) and is closed: in static mode
  nothing here may cut a log, and a replica that diverged must not be fed mismatched bytes.
- **Sending.** Log bytes from the replica's position up to the readable end, at most
  ``haTransferBatchSize`` (1 MiB) per frame, cut at a record boundary (a larger single record
  goes whole) and never across a segment end (a segment's blank tail goes as one BLANK frame):
  every offset a replica reports is a record boundary, so waiters and the dispatch cap need no
  torn-record handling. At most ``WINDOW_BYTES`` (4 MiB) are sent beyond the replica's last
  report, so a slow replica cannot make the master buffer without limit. The sender sleeps on
  an event every append sets (``notify_append``); an idle connection gets an empty DATA every
  ``haSendHeartbeatInterval`` (5 s).
- **Acknowledgement.** REPORT carries the replica's written and flushed ends. What counts is
  the durability the master gives its own writes: the written end (the replica's page cache)
  under ASYNC_FLUSH, as RocketMQ; the flushed end under SYNC_FLUSH. RocketMQ acks on written
  there too, and the fault campaign (seed 36, 2026-11-25) lost 4 acknowledged messages by it:
  a replica acknowledged them from its page cache, lost them to a power cut, was elected when
  the master was killed next (still in the sync-state set), and the old master truncated them
  as a diverged tail. A replica reports its flushed end as soon as its sync covers an append
  (slave.py), so this costs an ack the replica's fdatasync, overlapped with the master's own.
  ``wait_replicated(end)`` under
  SYNC_MASTER: SLAVE_NOT_AVAILABLE at once when fewer than ``inSyncReplicas - 1`` replicas are
  connected within ``haMaxGapNotInSync`` (256 MiB) of the end, else PUT_OK once that many
  have reported ``end`` or FLUSH_SLAVE_TIMEOUT after ``slaveTimeout`` (3 s). The message is
  stored either way; only PUT_OK counts as acknowledged.
- **In sync and the confirm offset.** As RocketMQ 5 judges it: a replica is caught up when it
  reports (acknowledges) the log end of that moment, or everything that was sent when the
  sender had caught up with the log end (under load the end moves past every report). It is
  in sync while it last was within ``haMaxTimeSlaveNotCatchup`` (15 s): an idle replica
  reports the unchanged end every ``haSendHeartbeatInterval`` (5 s) and stays in; one that
  lags, or goes silent or disconnects, leaves 15 s after it last held the end. ``confirm_offset``
  = the lowest report among in-sync replicas (the log end when there are none): under
  SYNC_MASTER dispatch stops there, so no consumer sees a message the replicas may lack.
- **Metadata.** ``metadata()`` (the broker's topics, groups and consumer offsets, opaque here)
  goes to a replica on connect, at once after ``notify_metadata()`` (a topic or group changed)
  and whenever its bytes change (checked every second: consumer offsets); replicas count the
  frames they applied in their REPORTs, and under SYNC_MASTER ``metadata_replicated()`` says
  when the replicas every acknowledgement needs hold a change (``metadata.py``).
- **Safety.** A REPORT past what was sent is a protocol error (RocketMQ #3016): the replica is
  dropped. A replica that sends nothing for ``haHousekeepingInterval`` (20 s) is dropped too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wharf.store.codec.layout import (
    BLANK_HEADER,
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
)
from wharf.store.codec.records import read_total_size
from wharf.store.config import StoreConfig
from wharf.store.ha import auth, frames
from wharf.store.ha.acks import ReplicaAcks
from wharf.store.ha.epochs import Epochs, consistent_point
from wharf.store.ha.metadata import MetadataShipping, ReplicaMetadata
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import PutStatus

log = logging.getLogger(__name__)

WINDOW_BYTES = 4 * 1024 * 1024
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Replica:
    """One connected replica as the master sees it (also what ``replicas()`` reports)."""

    broker_id: int
    address: str
    acked: int  # what acknowledgements count: ``written``, or ``flushed`` under SYNC_FLUSH
    written: int = 0  # its written end, as last reported
    flushed: int = 0
    sent: int = 0  # the offset the next frame starts at
    connected_at: float = field(default_factory=time.time)
    # Set when a frame ended at the log end (``target``: that end, at ``target_at``): once the
    # replica reports ``target`` it had caught up at ``target_at`` (monotonic).
    target: int = -1
    target_at: float = 0.0
    caught_up_at: float = 0.0  # monotonic; 0 = never
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    told: int = -1  # the committed offset its last frame carried
    metadata: ReplicaMetadata = field(default_factory=ReplicaMetadata)  # sent and applied

    def note_acked(self, log_end: int, now: float) -> None:
        """After a report (``acked`` updated): when did this replica last hold the master's
        whole log? RocketMQ 5's rule (``AutoSwitchHAConnection``): judged by its acknowledged
        offset against the master's log end, never by recent traffic. An acknowledgement at
        the log end ``log_end`` means caught up now (monotonic ``now``): an idle group's
        replica reports that end every haSendHeartbeatInterval (5 s), so it stays in sync
        (and in the controller's sync-state set, electable) however long nobody writes. Only
        the probe renewed it before, so 15 s after the last write an idle group's only
        candidate had left the set, and killing its master left the group without one. Under
        load the end moves past every report; the probe (``target``: the end a frame reached,
        sent at ``target_at``) says it held that end then."""
        if self.acked >= log_end:
            self.caught_up_at = now
            self.target = -1  # covered: a probe reaches at most the end of its sending
        elif self.target >= 0 and self.acked >= self.target:
            self.caught_up_at = max(self.caught_up_at, self.target_at)
            self.target = -1

    def in_sync(self, now: float, window_s: float) -> bool:
        """Caught up within ``window_s`` (haMaxTimeSlaveNotCatchup) of monotonic ``now``."""
        return bool(self.caught_up_at) and now - self.caught_up_at <= window_s


class HAMaster:
    def __init__(
        self,
        commit_log: CommitLog,
        config: StoreConfig,
        on_confirm: Callable[[], None],
        metadata: Callable[[], bytes] | None = None,
        *,
        sync_master: bool | None = None,
        epochs: Callable[[], Epochs] = list,
        replica_secret: Callable[[str, str], str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``on_confirm()``: the confirm offset moved (the facade wakes dispatch);
        ``sync_master``: acknowledge only replicated puts (default: brokerRole SYNC_MASTER);
        ``epochs()``: this log's master terms (controller mode; empty with static roles);
        ``replica_secret(access_key, peer_host)``: the secret of the replication account a
        replica must prove, PermissionError (its message goes to the replica) when that
        account may not replicate from there; None = replicas are not authenticated;
        ``ssl_context``: serve TLS (haTlsEnable), None = plain TCP."""
        self._log = commit_log
        self._config = config
        self._on_confirm = on_confirm
        self._shipping = MetadataShipping(metadata, self._recompute_metadata)
        self._epochs = epochs
        self._replica_secret = replica_secret
        self._ssl = ssl_context
        self.sync_master = (
            config.broker_role == "SYNC_MASTER" if sync_master is None else sync_master
        )
        self._need = max(0, config.in_sync_replicas - 1)
        self._ack_flushed = config.flush_disk_type == "SYNC_FLUSH"
        self.acks = ReplicaAcks(config.slave_timeout / 1000)
        self.metadata_acks = ReplicaAcks(config.slave_timeout / 1000)  # over metadata versions
        self._replicas: dict[int, Replica] = {}  # id(Replica) -> Replica
        # Controller mode: the replica ids every acknowledgement needs (the sync-state set
        # published in etcd, minus this master); None = static mode's count rule.
        self._required: set[int] | None = None
        self._last_caught_up: dict[int, float] = {}  # replica id -> monotonic time
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self.refused = 0  # handshakes refused (ERROR sent)
        self.slave_not_available = 0
        self._confirm_seen = 0  # the last confirm offset on_confirm reported
        self._committed_seen = 0  # the last committed offset the senders were woken for

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> int:
        """Listen; returns the bound port (``haListenPort`` 0 = an ephemeral one)."""
        self._server = await asyncio.start_server(
            self._accept,
            self._config.ha_listen_host,
            self._config.ha_listen_port,
            ssl=self._ssl,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("replication listener on %s:%d (%s, %s, inSyncReplicas %d)",
                 self._config.ha_listen_host, self.port, "TLS" if self._ssl else "plain TCP",
                 self._config.broker_role, self._config.in_sync_replicas)  # fmt: skip
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self.acks.fail_all()
        self.metadata_acks.fail_all()

    # --- what the facade calls -----------------------------------------------------------------
    def notify_append(self) -> None:
        for replica in self._replicas.values():
            replica.wake.set()

    def notify_durable(self) -> None:
        """The master's own sync moved its durable end (SYNC_FLUSH): when that moves the
        committed offset, the replicas hear of it now, not with the next append or heartbeat
        (5 s), so their reads are not held back."""
        committed = self.committed_offset()
        if committed != self._committed_seen:
            self._committed_seen = committed
            for replica in self._replicas.values():
                replica.wake.set()

    def committed_offset(self) -> int:
        """What this group's consumers may read, the offset DATA and WELCOME frames carry and
        a replica's reads stop at (store/role.py): as durable as an acknowledgement, so no
        power cut or failover takes back a record a consumer has read. The master's
        own durable end (its flushed offset under SYNC_FLUSH, else its written end), and under
        SYNC_MASTER no further than every in-sync replica has (``confirm_offset``). The fault
        campaign (seed 7719) saw a replica serve two records the master then lost to a power
        cut, re-elected and reused the offsets of: the replica had read what it copied."""
        end = self._log.durable_end(self._ack_flushed)
        return min(end, self.confirm_offset()) if self.sync_master else end

    def require(self, replica_ids: set[int] | None) -> None:
        """Controller mode: acknowledgements and the confirm offset need exactly these
        replicas from now on (the caller publishes a smaller set in etcd BEFORE calling, a
        larger one after: an acknowledged message is on every member etcd lists)."""
        self._required = None if replica_ids is None else set(replica_ids)
        self._recompute()

    def required(self) -> set[int] | None:
        """The replicas every acknowledgement needs (controller mode), None in static mode."""
        return None if self._required is None else set(self._required)

    def in_sync_ids(self) -> set[int]:
        """Replicas that caught up within haMaxTimeSlaveNotCatchup, connected or not (what the
        controller publishes as the sync-state set): a replica that just disconnected stays
        in it for that long, so acknowledgements wait for it (FLUSH_SLAVE_TIMEOUT) instead of
        silently going on without it."""
        window = self._config.ha_max_time_slave_not_catchup / 1000
        now = time.monotonic()
        return {i for i, at in self._last_caught_up.items() if now - at <= window}

    def refusal(self) -> str:
        """Why a write must be refused before it is appended ('' = none): in controller mode,
        fewer copies in sync than minInSyncReplicas."""
        required = self._required
        if required is None or len(required) + 1 >= self._config.min_in_sync_replicas:
            return ""
        return (
            f"only {len(required) + 1} in-sync replicas, minInSyncReplicas is "
            f"{self._config.min_in_sync_replicas}: writes are refused until a replica catches up"
        )

    def wait_replicated(self, end_offset: int) -> asyncio.Future[PutStatus]:
        """SYNC_MASTER's verdict on the batch ending at ``end_offset`` (see the module doc)."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[PutStatus] = loop.create_future()
        if self._required is not None and not self._required:
            result.set_result(PutStatus.PUT_OK)  # the sync-state set is this master alone
            return result
        gap = self._config.ha_max_gap_not_in_sync
        near = sum(1 for r in self._replicas.values() if end_offset - r.acked < gap)
        if self._required is None and near < self._need:
            self.slave_not_available += 1
            result.set_result(PutStatus.SLAVE_NOT_AVAILABLE)
            return result
        waited = self.acks.wait(end_offset)

        def done(future: asyncio.Future[bool]) -> None:
            if not result.done():
                ok = future.result()
                result.set_result(PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT)

        waited.add_done_callback(done)
        return result

    def confirm_offset(self) -> int:
        """Everything below it is on every in-sync replica (the log end when none is). Read
        by dispatch for every chunk under SYNC_MASTER: a few replicas, no allocation of note."""
        end = self._log.max_offset
        required = self._required
        if not self._replicas:
            return end if not required else self.acks.watermark
        now = time.monotonic()
        for replica in self._replicas.values():
            counts = (
                self.in_sync(replica, now) if required is None else replica.broker_id in required
            )
            if counts and replica.acked < end:
                end = replica.acked
        if required and not required <= {r.broker_id for r in self._replicas.values()}:
            end = min(end, self.acks.watermark)  # a required replica is not even connected
        return end

    def in_sync(self, replica: Replica, now: float | None = None) -> bool:
        """Caught up with the log end within haMaxTimeSlaveNotCatchup (monotonic ``now``)."""
        now = time.monotonic() if now is None else now
        return replica.in_sync(now, self._config.ha_max_time_slave_not_catchup / 1000)

    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    # --- connections ---------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        replica: Replica | None = None
        try:
            replica = await self._handshake(reader, writer, address)
            if replica is not None:
                await self._serve(replica, reader, writer)
        except (frames.ProtocolError, ConnectionError, asyncio.IncompleteReadError) as exc:
            log.warning("replica %s dropped: %s", address, exc or type(exc).__name__)
        except TimeoutError:
            log.warning("replica %s dropped: silent for haHousekeepingInterval", address)
        finally:
            self._connections.discard(task)
            if replica is not None:
                self._drop(replica)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> Replica | None:
        challenge = auth.new_nonce()
        writer.write(frames.encode_challenge(challenge))
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            kind, payload = await frames.read_frame(reader)
        if kind != frames.FrameType.HELLO:
            raise frames.ProtocolError(f"expected HELLO, got {kind.name}")
        hello, signed, proof = frames.decode_hello(payload)
        secret, problem = self._authenticate(hello, signed, proof, challenge, address)
        problem = problem or self._refusal(hello)
        if problem:
            self.refused += 1
            log.error("replica %s (id %d) refused: %s", address, hello.broker_id, problem)
            writer.write(frames.frame(frames.FrameType.ERROR, problem.encode()))
            await writer.drain()
            return None
        commit_log = self._log
        start = self._start_of(hello)
        writer.write(
            frames.encode_welcome(
                frames.Welcome(
                    commit_log.min_offset,
                    commit_log.max_offset,
                    self.committed_offset(),
                    start,
                    tuple(self._epochs()),
                ),
                lambda welcome: auth.welcome_proof(secret, hello.nonce, challenge, welcome),
            )
        )
        if start < hello.max_offset:
            # The replica must cut its log at ``start`` first (it restarts to do so, see
            # truncation.py) and comes back with a new HELLO.
            await writer.drain()
            log.warning("replica %s (id %d) holds %d bytes past the consistent point %d: it "
                        "truncates and reconnects", address, hello.broker_id,
                        hello.max_offset - start, start)  # fmt: skip
            return None
        # The replica synced its log before HELLO (slave.py): its end is durable there.
        end = hello.max_offset
        replica = Replica(hello.broker_id, address, acked=end, written=end, flushed=end, sent=start)
        if start == commit_log.max_offset:
            replica.caught_up_at = time.monotonic()  # it has everything already
            self._last_caught_up[replica.broker_id] = replica.caught_up_at
        self._replicas[id(replica)] = replica
        log.info("replica %s (%s/%s id %d) connected at offset %d (log end %d)", address,
                 hello.cluster, hello.broker_name, hello.broker_id, start,
                 commit_log.max_offset)  # fmt: skip
        return replica

    def _authenticate(
        self, hello: frames.Hello, signed: bytes, proof: bytes, challenge: bytes, address: str
    ) -> tuple[str, str]:
        """(the account's secret, '') when the replica proved an account this master accepts
        (or none is needed: ``('', '')``), else ('', why not)."""
        if self._replica_secret is None:
            return "", ""
        if not hello.access_key:
            return "", "not authenticated: this master needs haAccessKey / haSecretKey"
        try:
            secret = self._replica_secret(hello.access_key, address.rpartition(":")[0])
        except PermissionError as exc:
            return "", str(exc)
        if not auth.matches(auth.hello_proof(secret, challenge, signed), proof):
            return "", (
                f"not authenticated: access key {hello.access_key!r} is unknown or "
                "haSecretKey does not match it"
            )
        return secret, ""

    def _start_of(self, hello: frames.Hello) -> int:
        """Where this replica's copy continues: its end, the consistent point of the two
        logs' epochs (controller mode; below its end = it truncates first), or this log's
        oldest offset for an empty replica. -1: no common history."""
        mine = self._epochs()
        if hello.epochs and mine:
            return consistent_point(
                mine, self._log.max_offset, list(hello.epochs), hello.max_offset
            )
        if hello.max_offset == 0:
            return self._log.min_offset
        return hello.max_offset

    def _refusal(self, hello: frames.Hello) -> str:
        """Why this replica cannot continue from this log ('' = it can)."""
        commit_log = self._log
        if hello.segment_size != commit_log.file_size:
            return (
                f"segment sizes differ (replica {hello.segment_size}, master "
                f"{commit_log.file_size}): set mappedFileSizeCommitLog alike on both"
            )
        at, low, high = self._start_of(hello), commit_log.min_offset, commit_log.max_offset
        empty_the_store = "; empty the replica's store directory to copy this master afresh"
        if at < 0:
            return f"the replica's log shares no master term with this one{empty_the_store}"
        if at > high:
            return (
                f"the replica's log ends at {at}, past this master's end {high}: it holds "
                f"data this master does not have{empty_the_store}"
            )
        if at and at < low:
            return (
                f"the replica's log ends at {at}, before this master's oldest data "
                f"({low}): the bytes between are gone{empty_the_store}"
            )
        if at and at < high and not self._is_record_start(at):
            return f"offset {at} is not a record boundary of this master's log{empty_the_store}"
        return ""

    def _is_record_start(self, offset: int) -> bool:
        header = self._log.read_bytes(offset, BLANK_HEADER.size)
        if header is None:
            return False
        size, magic = BLANK_HEADER.unpack(header)
        return size > 0 and magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)

    async def _serve(
        self, replica: Replica, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        tasks = [
            asyncio.create_task(self._send_loop(replica, writer)),
            asyncio.create_task(self._shipping.serve(replica.metadata, writer)),
            asyncio.create_task(self._report_loop(replica, reader)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raise what ended the connection
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _send_loop(self, replica: Replica, writer: asyncio.StreamWriter) -> None:
        commit_log = self._log
        heartbeat = self._config.ha_send_heartbeat_interval / 1000
        last_frame = time.monotonic()
        while True:
            end = commit_log.max_offset
            if replica.sent < end and replica.sent - replica.written < WINDOW_BYTES:
                self._send_chunk(replica, writer, end)
                await writer.drain()
                last_frame = time.monotonic()
                continue
            if time.monotonic() - last_frame >= heartbeat:
                self._send_committed(replica, writer)
                await writer.drain()
                last_frame = time.monotonic()
                continue
            if replica.told != self.committed_offset():
                self._send_committed(replica, writer)  # an empty DATA: the replica may read on
                await writer.drain()
                last_frame = time.monotonic()
                continue
            replica.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(heartbeat):
                    await replica.wake.wait()

    def _send_chunk(self, replica: Replica, writer: asyncio.StreamWriter, end: int) -> None:
        commit_log = self._log
        start = replica.sent
        segment_end = (start // commit_log.file_size + 1) * commit_log.file_size
        header = commit_log.read_bytes(start, BLANK_HEADER.size)
        if header is None:
            raise frames.ProtocolError(f"offset {start} is no longer in this log (retention)")
        size, magic = BLANK_HEADER.unpack(header)
        if magic == BLANK_MAGIC_CODE:
            writer.write(frames.encode_blank(start))
            replica.sent = segment_end
        else:
            limit = min(end, segment_end, start + self._config.ha_transfer_batch_size)
            data = commit_log.read_bytes(start, limit - start)
            if data is None:
                raise frames.ProtocolError(f"cannot read [{start}, {limit}) of this log")
            if limit < end and limit < segment_end:
                cut = _whole_records(data)
                if cut == 0:  # one record larger than a batch: it goes whole
                    data = commit_log.read_bytes(start, size)
                    if data is None:
                        raise frames.ProtocolError(f"cannot read the record at {start}")
                else:
                    data = data[:cut]
            replica.told = self.committed_offset()
            writer.write(frames.data_header(start, replica.told, len(data)))
            writer.write(data)
            replica.sent = start + len(data)
        if replica.sent >= end and replica.target < 0:
            # One probe at a time: a newer target before the report of this one would keep
            # moving the goal under steady load and the replica would never count as caught up.
            replica.target, replica.target_at = replica.sent, time.monotonic()

    def _send_committed(self, replica: Replica, writer: asyncio.StreamWriter) -> None:
        replica.told = self.committed_offset()
        writer.write(frames.data_header(replica.sent, replica.told, 0))

    def notify_metadata(self) -> None:
        """Topics or groups changed: ship them now, not at the next second's check (a topic
        created just before a failover must be on the new master, RocketMQ #9804)."""
        self._shipping.changed()

    def metadata_replicated(self) -> asyncio.Future[bool]:
        """A metadata change was made (a Kafka commit): True once the replicas every
        acknowledgement needs hold a snapshot taken after this call, at once when none is
        needed (ASYNC_MASTER, a sync-state set of this master alone); False when too few
        are connected (static mode) or after slaveTimeout (3 s). What an answer that a
        failover must not take back waits for."""
        loop = asyncio.get_running_loop()
        version = self._shipping.changed()
        required = self._required
        alone = not self._need if required is None else not required
        if not self.sync_master or alone or (required is None and len(self._replicas) < self._need):
            result: asyncio.Future[bool] = loop.create_future()
            result.set_result(not self.sync_master or alone)
            return result
        return self.metadata_acks.wait(version)

    async def _report_loop(self, replica: Replica, reader: asyncio.StreamReader) -> None:
        timeout = self._config.ha_housekeeping_interval / 1000
        while True:
            async with asyncio.timeout(timeout):
                kind, payload = await frames.read_frame(reader)
            if kind != frames.FrameType.REPORT:
                raise frames.ProtocolError(f"expected REPORT, got {kind.name}")
            written, flushed, metadata_applied = frames.decode_report(payload)
            if written > replica.sent or written < replica.written:
                raise frames.ProtocolError(
                    f"reported offset {written} outside [{replica.written}, {replica.sent}]"
                )
            replica.written, replica.flushed = written, flushed
            replica.metadata.reported(metadata_applied)
            # A flushed end only grows; never past the written one (a report is one snapshot).
            durable = min(flushed, written) if self._ack_flushed else written
            replica.acked = max(replica.acked, durable)
            replica.note_acked(self._log.max_offset, time.monotonic())
            if replica.caught_up_at:
                self._last_caught_up[replica.broker_id] = replica.caught_up_at
            self._recompute()
            replica.wake.set()

    def _drop(self, replica: Replica) -> None:
        self._replicas.pop(id(replica), None)
        log.info("replica %s (id %d) disconnected at offset %d", replica.address,
                 replica.broker_id, replica.acked)  # fmt: skip
        self._recompute()

    def _recompute(self) -> None:
        """After a report or a drop: the ack watermark for waiters (the ``need``-th highest
        report), and dispatch woken when the confirm offset moved."""
        required = self._required
        if required is not None:
            by_id = {r.broker_id: r.acked for r in self._replicas.values()}
            if required <= set(by_id):
                self.acks.advance(min((by_id[i] for i in required), default=self._log.max_offset))
        elif self._need:
            acked = sorted((r.acked for r in self._replicas.values()), reverse=True)
            if len(acked) >= self._need:
                self.acks.advance(acked[self._need - 1])
        self._recompute_metadata()
        confirm = self.confirm_offset()
        if confirm != self._confirm_seen:
            self._confirm_seen = confirm
            self._on_confirm()
        self.notify_durable()

    def _recompute_metadata(self) -> None:
        """The metadata version every replica an acknowledgement needs holds, as ``_recompute``
        finds the log offset they all hold."""
        version = self._shipping.version
        replicas = self._replicas.values()
        required = self._required
        if required is not None:
            by_id = {r.broker_id: r.metadata.held(version) for r in replicas}
            if required <= set(by_id):
                self.metadata_acks.advance(min((by_id[i] for i in required), default=version))
        elif self._need:
            held = sorted((r.metadata.held(version) for r in replicas), reverse=True)
            if len(held) >= self._need:
                self.metadata_acks.advance(held[self._need - 1])


def _whole_records(data: bytes) -> int:
    """Length of the longest prefix of ``data`` made of whole records (0 if the first one
    does not fit)."""
    pos, size = 0, len(data)
    while pos + 4 <= size:
        total = read_total_size(data, pos)
        if total <= 0 or pos + total > size:
            break
        pos += total
    return pos
