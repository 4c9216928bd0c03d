"""The store's role, owned in one place: master or replica, the replication link it runs
(``HAMaster`` or ``HASlave``, built only here), the master terms (epochs), the controller's
write fence, promotion, following a moved master and a replica's truncate-and-restart.

The facade builds one ``Role`` and gives it named callables for what a role change needs of
the rest of the store (take the queue offsets, start the master-only services, sync a
replica's appends); ``broker/failover`` drives it through its ``StoreRole`` protocol (``promote``,
``set_write_fence``, ``replica_redial``, ``ha_master``, ``commit_log_end``, ``config``) and
the writer asks it, for each write, whether this store may take it (``refusal``) and what an
acknowledgement waits for (``replicated``) and must still pass (``check_ack``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.dispatch.reput import CommitLogSource, ReputService
from wharf.store.errors import (
    InSyncReplicasNotEnoughError,
    MasterFencedError,
    NotMasterError,
    StoreNotWritableError,
)
from wharf.store.ha import SLAVE, SYNC_MASTER, ReplicaLink, epochs, truncation
from wharf.store.ha.epochs import Epochs
from wharf.store.ha.master import HAMaster
from wharf.store.ha.slave import HASlave
from wharf.store.ha.status import ReplicationStatus, master_status, replica_status
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import PutStatus
from wharf.store.paths import StorePaths
from wharf.store.services.ledger import lower_log_offset_blocking

log = logging.getLogger(__name__)

__all__ = ["Role"]


class Role:
    """One store's role. ``replica`` is the one answer to "may this store write on its own":
    True for a SLAVE and, in controller mode, until ``promote``."""

    def __init__(self, config: StoreConfig, paths: StorePaths, link: ReplicaLink) -> None:
        self._config = config
        self._paths = paths
        self._link = link
        self.replica = config.broker_role == SLAVE or link.controller
        self._sync_flush = config.flush_disk_type == SYNC_FLUSH
        self._epochs: Epochs = []  # master terms (controller mode), loaded at start
        self._fence: Callable[[], str] | None = None
        self._master: HAMaster | None = None
        self._slave: HASlave | None = None
        self._commit_log: CommitLog | None = None  # set by attach()
        self._reput: ReputService | None = None
        self._source: CommitLogSource | None = None
        self._sync_in_background: Callable[[int], None] | None = None
        self._take_offsets: Callable[[], None] | None = None
        self._start_master_services: Callable[[], Awaitable[None]] | None = None

    @property
    def config(self) -> StoreConfig:
        return self._config

    # --- lifecycle ---------------------------------------------------------------------------
    async def before_recovery(self) -> None:
        """Controller mode, before recovery opens the log: apply a truncation decided before a
        restart (``_lower_ledgers_blocking`` keeps the ledgers' checkpoints under the cut),
        then load the terms."""
        if not self._link.controller:
            return
        await asyncio.to_thread(
            truncation.apply_blocking,
            self._paths,
            self._config.mapped_file_size_commit_log,
            self._lower_ledgers_blocking,
        )
        self._epochs = await asyncio.to_thread(epochs.load_blocking, self._paths.epochs_file)

    def attach(
        self,
        commit_log: CommitLog,
        reput: ReputService,
        source: CommitLogSource,
        sync_in_background: Callable[[int], None],
        take_offsets: Callable[[], None],
        start_master_services: Callable[[], Awaitable[None]],
    ) -> None:
        """What recovery opened, before dispatch starts: a SYNC_MASTER's reads stop at the
        confirm offset from the first dispatch on. ``sync_in_background(end)`` (the writer's)
        follows a replica's appends under SYNC_FLUSH; the two hooks are what ``promote``
        needs of the store."""
        self._commit_log, self._reput, self._source = commit_log, reput, source
        self._sync_in_background = sync_in_background
        self._take_offsets, self._start_master_services = take_offsets, start_master_services
        if self._link.controller:
            # A controller-mode store starts as a replica, and its log past what it had
            # dispatched may be a deposed master's writes no replica has: consumers (who read
            # replicas) must not see them, since the group's new master overwrites them. Held
            # until a master's handshake finds this log a prefix of its own (``_agreed``), or
            # until ``promote``. A fault campaign saw a restarted ex-master serve 4 such
            # messages as a replica, then truncate them (tests/fault/campaign, seed 36).
            held = reput.reput_from_offset
            source.confirm = lambda: held
        elif self._config.broker_role == SYNC_MASTER:
            # Consumers never see what the in-sync replicas lack (a failover cannot take back
            # a message someone consumed).
            source.confirm = self.confirm_offset
        elif self.replica:
            # A static SLAVE reads up to what its master says is committed (``_agreed``).
            source.confirm = self._replica_committed

    async def start(self) -> None:
        """A replica dials its master; a master with haListenPort listens for replicas."""
        commit_log = self._commit_log
        assert commit_log is not None
        config, link = self._config, self._link
        if self.replica:
            self._slave = HASlave(
                commit_log,
                config,
                (link.cluster, link.broker_name, link.broker_id),
                link.master_address or (lambda: config.ha_master_address),
                self._replica_appended,
                link.apply_metadata,
                epochs=lambda: self._epochs,
                on_epochs=self._take_epochs,
                on_agreed=self._agreed,
                on_truncate=self._truncate_and_restart,
                on_committed=self._reput.wakeup if self._reput is not None else None,
                credentials=link.credentials,
                ssl_context=link.client_ssl,
            )
            self._slave.start()
        elif config.ha_listen_port >= 0:
            await self._start_master(None, list)  # static roles: brokerRole, no terms

    async def _start_master(self, sync_master: bool | None, terms: Callable[[], Epochs]) -> None:
        assert self._commit_log is not None and self._reput is not None
        self._master = HAMaster(
            self._commit_log,
            self._config,
            self._reput.wakeup,
            self._link.metadata,
            sync_master=sync_master,
            epochs=terms,
            replica_secret=self._link.replica_secret,
            ssl_context=self._link.server_ssl,
        )
        await self._master.start()

    async def stop_replica(self) -> None:
        """First at shutdown: stop copying from the master."""
        if self._slave is not None:
            await self._slave.stop()

    async def stop_master(self) -> None:
        """After the last puts at shutdown: their replica waiters are answered."""
        if self._master is not None:
            await self._master.stop()

    # --- what each write asks ----------------------------------------------------------------
    def refusal(self) -> None:
        """Raise why this store must not take a write now: fenced (MasterFencedError), too few
        replicas in sync (InSyncReplicasNotEnoughError), a replica (NotMasterError)."""
        fence = self._fence
        if fence is not None:
            reason = fence()
            if reason:
                raise MasterFencedError(reason)
        master = self._master
        if master is not None:
            refusal = master.refusal()
            if refusal:
                raise InSyncReplicasNotEnoughError(refusal)
        if self.replica:
            raise NotMasterError(
                f"this broker is a SLAVE of {self._link.broker_name} (brokerRole): it takes "
                "writes from its master only; send to the master"
            )

    def notify_append(self) -> None:
        """After an append: replication runs alongside the local flush."""
        if self._master is not None:
            self._master.notify_append()

    def notify_durable(self) -> None:
        """After each SYNC_FLUSH sync: the replicas hear of a committed offset it moved."""
        if self._master is not None:
            self._master.notify_durable()

    @property
    def waits_for_replicas(self) -> bool:
        """A SYNC_MASTER: an acknowledgement waits for the replicas too."""
        master = self._master
        return master is not None and master.sync_master

    def replicated(self, end_offset: int) -> Awaitable[PutStatus] | None:
        """A SYNC_MASTER's wait for its replicas to have ``end_offset`` (None otherwise)."""
        master = self._master
        if master is None or not master.sync_master:
            return None
        return master.wait_replicated(end_offset)

    def check_ack(self) -> None:
        """Before an acknowledgement: a master fenced meanwhile stored the message but may no
        longer speak for the group (MasterFencedError)."""
        fence = self._fence
        if fence is not None:
            reason = fence()
            if reason:
                raise MasterFencedError(f"{reason}: the message may not be kept")

    def confirm_offset(self) -> int:
        """How far a SYNC_MASTER's reads may go: what the in-sync replicas have."""
        master = self._master
        return master.confirm_offset() if master is not None else self.commit_log_end()

    # --- the failover's view (broker/failover/role.py ``StoreRole``) ---------------------------
    def commit_log_end(self) -> int:
        assert self._commit_log is not None
        return self._commit_log.max_offset

    @property
    def ha_master(self) -> HAMaster | None:
        """The replication listener of a master with haListenPort (None otherwise)."""
        return self._master

    @property
    def ha_slave(self) -> HASlave | None:
        """A replica's connection to its master (None on a master)."""
        return self._slave

    @property
    def epochs(self) -> Epochs:
        return list(self._epochs)

    def set_write_fence(self, fence: Callable[[], str] | None) -> None:
        """``fence()`` returns why this master must not acknowledge now ('' = it may): the
        controller's lease has run out. Checked before an append and before an ack."""
        self._fence = fence

    def replica_redial(self) -> None:
        """A replica's master moved: reconnect to where ``ReplicaLink.master_address`` points."""
        if self._slave is not None:
            self._slave.redial()

    async def promote(self, epoch: int, sync_master: bool) -> None:
        """A replica becomes the master of term ``epoch``: it stops copying, dispatches all
        it has and takes the queue offsets from its ConsumeQueues (a reused offset would lose
        messages, RocketMQ #7689), records (epoch, log end) durably before any write, then
        starts what only a master runs (delays, timers, transaction checks, pop) and its
        replication listener."""
        if not self.replica:
            raise RuntimeError("promote() of a store that is already a master")
        assert self._commit_log is not None and self._source is not None
        assert self._take_offsets is not None and self._start_master_services is not None
        if self._slave is not None:
            await self._slave.stop()
            self._slave = None
        end = self._commit_log.max_offset
        # The new master's log is the group's: all of it is dispatched before its queue
        # offsets are taken (the hold of ``attach`` ends here).
        self._source.confirm = None
        assert self._reput is not None
        if not await self._reput.wait_dispatched(end, 60.0):
            raise StoreNotWritableError(f"dispatch did not reach {end}: cannot take over")
        self._take_offsets()
        self._epochs = [*(e for e in self._epochs if e[0] < epoch), (epoch, end)]
        await asyncio.to_thread(epochs.save_blocking, self._paths.epochs_file, self._epochs)
        self.replica = False
        await self._start_master_services()
        await self._start_master(sync_master, lambda: self._epochs)
        # Reads past the hold (attach) from here: a SYNC_MASTER's up to what its in-sync
        # replicas have, once its replication listener exists to say so; an ASYNC_MASTER's all.
        self._source.confirm = self.confirm_offset if sync_master else None
        if self._reput is not None:
            self._reput.wakeup()
        log.warning("promoted to master of term %d at log end %d (%s)", epoch, end,
                    "SYNC_MASTER" if sync_master else "ASYNC_MASTER")  # fmt: skip

    def status(self) -> ReplicationStatus:
        """Role, offsets and replicas (a master) or the link to the master (a replica)."""
        end = self.commit_log_end()
        epoch = self._epochs[-1][0] if self._epochs else 0
        if self.replica:
            return replica_status(self._slave, end, epoch)
        return master_status(
            self._config.broker_role, self._master, end, epoch, self._link.broker_id
        )

    # --- a replica's handshake callbacks -----------------------------------------------------
    def _replica_appended(self) -> None:
        """A replica appended its master's bytes: flush and dispatch follow, as for a write."""
        commit_log = self._commit_log
        assert commit_log is not None and self._reput is not None
        if self._sync_flush:  # dispatch follows the sync, as for a master's appends
            assert self._sync_in_background is not None
            self._sync_in_background(commit_log.max_offset)
        else:
            commit_log.wakeup_flush()
            self._reput.wakeup()

    def _lower_ledgers_blocking(self, offset: int) -> None:
        """The commit log is cut at ``offset``: the timer's and the transactions' checkpoints
        must not walk for closing records from a P past it (the bytes there will be other
        records, replicated from the new master)."""
        for path in (self._paths.timer_checkpoint_file, self._paths.transaction_checkpoint_file):
            lower_log_offset_blocking(path, offset)

    @property
    def holds_tail(self) -> bool:
        """Recovery must not re-dispatch past what was dispatched before (``attach`` says why)."""
        return self._link.controller

    def _agreed(self) -> None:
        """A master's handshake found this replica's log a prefix of its own: it may be read
        up to the master's committed offset (``HAMaster.committed_offset``), never further.
        What it copied past that offset may be what the master has not made durable nor
        got onto its in-sync replicas, and a power cut of the master and its re-election
        would take it back (the fault campaign, seed 7719: this replica, out of the in-sync
        set, served two such records; the next term reused their offsets)."""
        if self.replica and self._source is not None and self._reput is not None:
            self._source.confirm = self._replica_committed
            self._reput.wakeup()

    def _replica_committed(self) -> int:
        """A replica's read limit: its master's committed offset as last heard (0 before
        any master was heard: what recovery dispatched stays readable, nothing more)."""
        slave = self._slave
        return slave.confirm_offset if slave is not None else 0

    async def _take_epochs(self, entries: Epochs) -> None:
        """A replica adopts its master's terms at each handshake."""
        if entries != self._epochs:
            self._epochs = list(entries)
            await asyncio.to_thread(epochs.save_blocking, self._paths.epochs_file, self._epochs)

    async def _truncate_and_restart(self, offset: int) -> None:
        await asyncio.to_thread(truncation.request_blocking, self._paths, offset)
        if self._link.restart is not None:
            self._link.restart(f"replica log truncation at {offset}")
