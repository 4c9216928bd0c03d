"""Controller mode: a broker group elects its master on etcd (RocketMQ 5's controller, with etcd's
leases and transactions instead of a DLedger group of our own: no home-made consensus).

Keys, under ``/wharf/<cluster>/<brokerName>/``::

    master  {"id", "epoch", "address", "ha"}  bound to the master's lease: gone when it lapses
    epoch   "<n>"                              the last term; only grows, never deleted
    sss     {"epoch", "members": [ids]}        the sync-state set: the master + caught-up replicas
    transfer {"to", "epoch"}                   a handover in progress (TransferMaster)
    role    "SYNC_MASTER" | "ASYNC_MASTER"     the group's acknowledgement mode (the first
                                               master's brokerRole; a SLAVE-configured replica
                                               that is elected uses it)

- **Election.** A replica sees no ``master`` (polled every ``POLL_S``, 200 ms: a watch stream
  must be re-created after every etcd restart, a poll needs nothing) and, if it is in ``sss``
  (or there is none yet), waits ``RANK_DELAY_S`` x its rank among the set's members, then runs
  ONE transaction: ``master`` absent, ``epoch`` unchanged, ``sss`` unchanged -> put ``master``
  (with its lease), ``epoch + 1``, ``sss = {me}``. One winner per term by construction. A
  replica outside the set never campaigns: an acknowledged message is on every member, so
  electing a non-member could lose it.
- **Master.** The winner promotes its store (``MessageStore.role.promote``: offsets from its queues,
  the epoch recorded before any write), publishes its HA address in ``master``, registers with
  the NameServers as id 0, and keeps its lease alive every TTL/3 (a renewal unanswered for
  0.3 s is sent again, to the next etcd member). It acknowledges nothing once
  ``send time of the last renewal + TTL - FENCE_MARGIN_S`` has passed (the store's write fence):
  by then etcd may have let the lease go and a replica taken over. It grows ``sss`` with
  replicas that caught up (requiring their acknowledgements first, and listing them once they
  hold the log end of that moment: all it acknowledged without them, as RocketMQ's
  ``maybeExpandInSyncStateSet`` wants the confirm offset) and shrinks it with replicas that
  fell behind for haMaxTimeSlaveNotCatchup (before it stops waiting for them), each change a
  transaction conditioned on its own ``master`` key and the set's revision.
- **Stepping down.** A master that finds ``master`` gone or someone else's, or its lease lost,
  restarts the process (``restart``): it comes back as a replica, follows the new master,
  truncates what it wrote that the group never acknowledged (crash-safe, before recovery:
  ``wharf.store.ha.truncation``) and catches up; its shutdown revokes the lease without waiting
  for its replicas, so its NameServer registration ends at once. On SIGTERM a master stops
  taking writes, waits
  (at most ``HANDOVER_WAIT_S``) until its in-sync replicas have everything, then revokes its
  lease: a replica takes over within a poll. ``transfer`` (``wharf admin transfer-master``)
  does the same naming the successor, which campaigns first; this broker then restarts as a
  replica.
- **etcd down.** No election can happen; a master fences itself when its lease cannot be
  renewed and goes on once etcd answers again while its key still stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wharf.broker.errors import FailedPreconditionError
from wharf.broker.failover.kv import Absent, CreatedAt, Delete, Etcd, ModifiedAt, Put, ValueIs
from wharf.broker.failover.role import StoreRole

log = logging.getLogger(__name__)

POLL_S = 0.2
RANK_DELAY_S = 0.3
FENCE_MARGIN_S = 1.0
HANDOVER_WAIT_S = 5.0
TRANSFER_PRIORITY_RANKS = 5  # a named successor gets ~1.5 s before the others campaign
SSS_CHECK_S = 0.1  # a local check; etcd is written only on a change
RENEW_RETRY_S = 0.25  # after a failed renewal (TTL/3, 1 s by default, between good ones)
# A renewal not answered by then is sent again, the first one left running; the first answer
# wins. etcd answers a keepalive in ~1 ms on a quiet machine (tens of ms on CI's 2 loaded
# cores), but a member cut from its peers, or an etcd between leaders, holds it for the whole
# 2 s time-out. One attempt at a time, a renewal sent 1 s after the last good one failed at the
# fence (TTL 3 s - 1 s margin), and the next went out only then (CI,
# test_isolated_etcd_members_lose_no_message: 6.8 s without an acknowledgement). Resent every
# 0.3 s (``round_robin``: to the next member), one lands within 0.3 s of a member able to serve.
RENEW_HEDGE_S = 0.3
RANK_JITTER_S = 0.05


@dataclass(frozen=True, slots=True)
class Timing:
    """The election's delays: the defaults are the broker's; unit tests shorten them."""

    poll_s: float = POLL_S
    rank_delay_s: float = RANK_DELAY_S
    jitter_s: float = RANK_JITTER_S
    sss_check_s: float = SSS_CHECK_S
    renew_s: float | None = None  # between good renewals; None: TTL/3
    renew_retry_s: float = RENEW_RETRY_S
    renew_hedge_s: float = RENEW_HEDGE_S
    renew_give_up_s: float | None = None  # a renewal unanswered this long fails; None: the TTL
    fence_margin_s: float = FENCE_MARGIN_S
    handover_wait_s: float = HANDOVER_WAIT_S


def campaign_rank(
    me: int, members: Sequence[int], last_master: int, transfer_to: int | None
) -> int:
    """How many rank delays a replica of the sync-state set ``members`` (sorted; empty: no set
    yet) waits before it campaigns: its place among the members other than the master it
    last followed (so the lowest id campaigns first, and a master that comes back as a replica
    comes last); a transfer's named successor goes first and everyone else waits
    TRANSFER_PRIORITY_RANKS more. (A replica outside a non-empty set does not campaign at all:
    the caller checks that first.)"""
    candidates = [m for m in members if m != last_master] or [me]
    rank = candidates.index(me) if me in candidates else 0
    if transfer_to is not None:  # a handover names its successor: it goes first
        rank = 0 if transfer_to == me else rank + TRANSFER_PRIORITY_RANKS
    return rank


class Failover:
    def __init__(
        self,
        *,
        etcd: Etcd,
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        ttl_ms: int,
        wished_role: str,
        store: StoreRole,
        on_master: Callable[[], Awaitable[None]],
        restart: Callable[[str], None],
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``etcd``: the controller's etcd (``AetcdEtcd``; ``MemoryEtcd`` in unit tests);
        ``store``: what failover drives of the store (``StoreRole``: ``MessageStore.role``);
        ``on_master()``: this broker became the master (the controller re-registers it as
        id 0); ``restart(reason)``: restart the process as a replica; ``clock``: monotonic
        seconds (the write fence's)."""
        self.etcd = etcd
        self._prefix = f"/wharf/{cluster}/{broker_name}/"
        self.broker_id = broker_id
        self.address = address
        self.ttl_s = max(2, ttl_ms // 1000)
        self.wished_role = wished_role
        self.store = store
        self.on_master = on_master
        self.restart = restart
        self.timing = timing
        self._clock = clock
        self.master_ha = ""  # the master's HA address, as a replica follows it
        self.master_id = 0
        self.epoch = 0  # the term this broker is master of (0 = not master)
        self.is_master = False
        self._promoted = False  # the store took over the term (``leads``)
        self._lease = 0  # the id of our master key's lease (0 = none)
        self._create_revision = 0  # of our master key
        self._sss_revision = 0
        self._sss: set[int] = set()
        # Master: in-sync replicas whose acks are required but etcd does not list yet, with
        # the log end each must acknowledge first (``sync_state_once``).
        self._joining: dict[int, int] = {}
        self._renewed_until = 0.0  # clock(): acknowledge nothing after it
        self._tasks: list[asyncio.Task[None]] = []
        self._stepping_down = False
        self._term_lost = False  # stepped down: its key or lease is gone, nothing to hand over
        self.elections_won = 0
        self.last_error = ""
        self._said = ""

    @property
    def sync_state_set(self) -> set[int]:
        """The sync-state set as this master last published it (empty on a replica)."""
        return set(self._sss)

    @property
    def term_lost(self) -> bool:
        """This master stepped down (its key, lease or sync-state set gone or another's)."""
        return self._term_lost

    @property
    def stepping_down(self) -> bool:
        """This master is handing over or has asked to restart as a replica."""
        return self._stepping_down

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self.store.set_write_fence(self.fence)
        self._tasks = [asyncio.create_task(self._run(), name="failover")]

    async def stop(self) -> None:
        """Hand over (a master) and stop. A master that lost its term does not wait for its
        replicas (up to HANDOVER_WAIT_S for a lagging one): nothing it holds may still be
        acknowledged; its lease is revoked (a key left standing would delay the election)."""
        if self.is_master and self._term_lost:
            with contextlib.suppress(Exception):
                await self.etcd.revoke(self._lease)
            self.is_master = False
        elif self.is_master:
            await self._hand_over()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self.etcd.close()

    def fence(self) -> str:
        """The store's write fence: why this broker must not acknowledge now ('' = it may)."""
        if self._stepping_down:
            return "this master is handing over to a replica (or stepping down)"
        if not self.is_master:
            return ""  # a replica refuses writes anyway (NotMasterError)
        if self._clock() > self._renewed_until:
            return (
                "this master's etcd lease was not renewed in time: another replica may have "
                "been elected"
            )
        return ""

    # --- the loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
                self.last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd unreachable, a timeout: try again next poll
                reason = f"{type(exc).__name__}: {exc}"
                if reason != self.last_error:
                    log.warning("controller (etcd %s): %s", self.etcd.target, reason)
                self.last_error = reason
            await asyncio.sleep(self.timing.poll_s)

    async def poll_once(self) -> None:
        """One poll: a master checks its key is still its own; a replica follows the master
        etcd names, or campaigns when there is none."""
        entry = await self.etcd.get(self._key("master"))
        if self.is_master:
            mine = entry is not None and entry.create_revision == self._create_revision
            if not mine:
                self._step_down("its master key is gone or another replica's")
            return
        if entry is not None:
            master = json.loads(entry.value)
            if master["id"] == self.broker_id:
                return  # this broker's previous life (kill -9): its lease has yet to run out
            if master.get("ha") and master["ha"] != self.master_ha:
                log.info("following master id %d (term %d) at %s", master["id"], master["epoch"],
                         master["ha"])  # fmt: skip
                self.master_ha = master["ha"]
                self.master_id = master["id"]
                self.store.replica_redial()
            return
        await self._campaign()

    async def _campaign(self) -> None:
        sss = await self.etcd.get(self._key("sss"))
        members = sorted(json.loads(sss.value)["members"]) if sss is not None and sss.value else []
        if members and self.broker_id not in members:
            # Not caught up when the master last said: electing it could lose acks.
            self._say(
                f"no master, and this replica is not in the sync-state set {members}: "
                "not campaigning (an unclean election could lose acknowledged messages)"
            )
            return
        transfer = await self.etcd.get(self._key("transfer"))
        transfer_to = json.loads(transfer.value)["to"] if transfer is not None else None
        rank = campaign_rank(self.broker_id, members, self.master_id, transfer_to)
        await asyncio.sleep(
            rank * self.timing.rank_delay_s + random.uniform(0, self.timing.jitter_s)
        )
        if await self.etcd.get(self._key("master")) is not None:
            return
        epoch_entry = await self.etcd.get(self._key("epoch"))
        epoch = int(epoch_entry.value) if epoch_entry is not None and epoch_entry.value else 0
        lease = await self.etcd.grant(self.ttl_s)
        sent = self._clock()
        term = epoch + 1
        master = {"id": self.broker_id, "epoch": term, "address": self.address, "ha": ""}
        sss_value = {"epoch": term, "members": [self.broker_id]}
        won = await self.etcd.transaction(
            compare=[
                Absent(self._key("master")),
                ValueIs(self._key("epoch"), str(epoch).encode())
                if epoch_entry is not None
                else Absent(self._key("epoch")),
                *([ModifiedAt(self._key("sss"), sss.mod_revision)] if sss is not None else []),
            ],
            success=[
                Put(self._key("master"), json.dumps(master).encode(), lease),
                Put(self._key("epoch"), str(term).encode()),
                Put(self._key("sss"), json.dumps(sss_value).encode()),
                Delete(self._key("transfer")),
            ],
        )
        if not won:
            self._say(f"lost the election for term {term}")
            with contextlib.suppress(Exception):
                await self.etcd.revoke(lease)
            return
        await self._become_master(lease, sent, term, master)

    async def _become_master(
        self, lease: int, sent: float, term: int, master: dict[str, Any]
    ) -> None:
        self._lease = lease
        self._renewed_until = sent + self.ttl_s - self.timing.fence_margin_s
        entry = await self.etcd.get(self._key("master"))
        self._create_revision = entry.create_revision if entry is not None else 0
        sss = await self.etcd.get(self._key("sss"))
        self._sss_revision = sss.mod_revision if sss is not None else 0
        self._sss = {self.broker_id}
        self._joining = {}
        role_entry = await self.etcd.get(self._key("role"))
        role_value = role_entry.value if role_entry is not None else b""
        role = role_value.decode() if role_value else self.wished_role
        if role not in ("SYNC_MASTER", "ASYNC_MASTER"):
            role = "ASYNC_MASTER"
        if role_entry is None:
            await self.etcd.put(self._key("role"), role.encode())
        self.epoch, self.is_master = term, True
        self.elections_won += 1
        self._tasks.append(asyncio.create_task(self._keep_lease(), name="failover-lease"))
        try:
            await self.store.promote(term, role == "SYNC_MASTER")
            ha = self.store.ha_master
            if ha is None:
                raise RuntimeError("the promoted store has no replication listener")
            ha.require(set())  # the set is this master alone until replicas catch up
            master["ha"] = f"{self.store.config.ha_listen_host}:{ha.port}"
            await self.etcd.put(self._key("master"), json.dumps(master).encode(), lease)
            self._promoted = True
        except Exception as exc:
            # Half a master (its HA port taken, etcd gone mid-way) serves nobody: give the
            # term back at once and come back as a replica; the group elects again.
            log.error("taking over term %d failed (%s: %s): giving it back", term,
                      type(exc).__name__, exc)  # fmt: skip
            with contextlib.suppress(Exception):
                await self.etcd.revoke(lease)
            self._step_down(f"could not take over term {term}")
            return
        self._tasks.append(asyncio.create_task(self._keep_sss(), name="failover-sss"))
        log.warning("elected master of %s, term %d (%s)", self._prefix, term, role)
        await self.on_master()

    # --- a master: its lease and the sync-state set ----------------------------------------------
    async def _keep_lease(self) -> None:
        failures = 0
        every = self.timing.renew_s or self.ttl_s / 3
        while self.is_master:
            # Renewed: every TTL/3. Failing (a renewal fails after a TTL of attempts): soon
            # again, so a renewal lands as soon as etcd answers again (its restart gives the
            # lease only its TTL); one log line per failed renewal.
            await asyncio.sleep(every if not failures else self.timing.renew_retry_s)
            try:
                renewed = await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lease renewal failed (%s): fencing at %.1f s", exc,
                            self._renewed_until - self._clock())  # fmt: skip
                failures += 1
                continue
            if not renewed:
                return
            if failures:
                log.warning("lease renewed after %d failed attempts", failures)
                failures = 0

    async def renew_once(self) -> bool:
        """Keep the master's lease alive once and move the write fence to the renewal's send
        time + TTL - the fence margin; False if the lease had ended (this master steps down).
        Raises when etcd does not answer (the fence stays where it was)."""
        ttl, sent = await self._refresh_hedged()
        if ttl <= 0:
            self._step_down("its lease expired")
            return False
        self._renewed_until = sent + ttl - self.timing.fence_margin_s
        return True

    async def _refresh_hedged(self) -> tuple[int, float]:
        """(TTL etcd answered, that attempt's send time). While no attempt has answered, another
        is sent every ``renew_hedge_s`` (the earlier ones left running: etcd's own time-out, 2 s,
        ends them) for up to a TTL, and the first answer wins: renewals keep reaching every
        member, so one lands as soon as any member can serve it (a new etcd leader ~1-2 s after
        the old one was cut off). The fence moves from the winning attempt's send time: etcd
        refreshed the lease no earlier. Raises the last error when a TTL passed unanswered."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (self.timing.renew_give_up_s or self.ttl_s)
        pending: dict[asyncio.Future[int], float] = {}
        error: BaseException = TimeoutError(f"no etcd member renewed the lease in {self.ttl_s} s")
        next_send = loop.time()
        try:
            while True:
                now = loop.time()
                if now >= next_send:
                    if now >= give_up:
                        raise error
                    pending[asyncio.ensure_future(self.etcd.refresh(self._lease))] = self._clock()
                    next_send = now + self.timing.renew_hedge_s
                if not pending:
                    await asyncio.sleep(next_send - now)
                    continue
                done, _ = await asyncio.wait(
                    pending, timeout=max(0.0, next_send - now), return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    sent = pending.pop(task)
                    if task.exception() is None:
                        return task.result(), sent
                    error = task.exception() or error
        finally:
            for task in pending:
                task.cancel()

    async def _keep_sss(self) -> None:
        """Grow the sync-state set with caught-up replicas, shrink it with lagging ones."""
        while self.is_master:
            await asyncio.sleep(self.timing.sss_check_s)
            if not await self.sync_state_once():
                return

    async def sync_state_once(self) -> bool:
        """One check of the sync-state set against the replicas in sync now; publishes a
        change in etcd (a transaction on this master's key and the set's revision). A
        newcomer's acknowledgements are required at once, but it is listed only once it has
        acknowledged the log end of that moment (``_joining``): everything this master
        acknowledged without it. Leavers stay required until etcd no longer lists them.
        False if the set changed under this master (it steps down) or it has no replication
        listener."""
        ha = self.store.ha_master
        if ha is None:
            return False
        local = ha.in_sync_ids()
        published = self._sss - {self.broker_id}
        dropped = set(self._joining) - local  # fell behind before they were listed
        for replica_id in dropped:
            del self._joining[replica_id]
        fresh = local - published - set(self._joining)
        if fresh:
            # Acks need the newcomers from here on; what was acknowledged without them ends
            # at or before today's log end, and they must hold that before etcd lists them:
            # a newcomer listed while it lacked a message acknowledged without it could be
            # elected, and the message lost (the CI campaign, seed 36, 2026-11-28: 12
            # acknowledged messages gone, their offsets reused by the next term).
            ha.require(published | set(self._joining) | fresh)
            end = self.store.commit_log_end()
            for replica_id in fresh:
                self._joining[replica_id] = end
        acked = {r.broker_id: r.acked for r in ha.replicas()}
        for replica_id in fresh:
            if acked.get(replica_id, -1) < self._joining[replica_id]:
                log.info("replica %d caught up: its acks are required; listed in the sync-state "
                         "set once it holds %d (it has %d)", replica_id,
                         self._joining[replica_id], acked.get(replica_id, -1))  # fmt: skip
        ready = {i for i, end in self._joining.items() if acked.get(i, -1) >= end}
        wanted = (published & local) | ready
        joining = set(self._joining) - ready
        if wanted == published:
            if dropped:
                ha.require(published | joining)  # never listed: no longer waited for
            return True
        value = json.dumps({"epoch": self.epoch, "members": sorted({self.broker_id, *wanted})})
        ok = await self.etcd.transaction(
            compare=[
                CreatedAt(self._key("master"), self._create_revision),
                ModifiedAt(self._key("sss"), self._sss_revision),
            ],
            success=[Put(self._key("sss"), value.encode())],
        )
        if not ok:
            self._step_down("its sync-state set changed under it")
            return False
        entry = await self.etcd.get(self._key("sss"))
        self._sss_revision = entry.mod_revision if entry is not None else 0
        self._sss = {self.broker_id, *wanted}
        for replica_id in ready:
            self._joining.pop(replica_id, None)
        # Leavers are dropped only now, AFTER etcd no longer lists them.
        ha.require(wanted | set(self._joining))
        log.info("sync-state set of term %d: %s", self.epoch, sorted(self._sss))
        return True

    # --- handing over --------------------------------------------------------------------------
    async def transfer(self, to: int) -> tuple[int, int]:
        """Hand the group to replica ``to`` (0: any in-sync one): stop taking writes, wait
        until it has everything, name it in ``transfer`` (the others let it campaign first),
        revoke the lease; then this broker restarts as a replica. Returns (new master id,
        its term) once etcd shows it (FailedPreconditionError if this is no master, ``to`` is
        not in the sync-state set, or no replica took over within HANDOVER_WAIT_S)."""
        if not self.is_master or self._stepping_down:
            raise FailedPreconditionError(
                f"broker {self.broker_id} is not the master of {self._prefix}: send "
                "TransferMaster to the master (wharf cluster list shows it)"
            )
        candidates = sorted(self._sss - {self.broker_id})
        if to == 0 and candidates:
            to = candidates[0]
        if to not in candidates:
            raise FailedPreconditionError(
                f"replica {to} is not in the sync-state set {sorted(self._sss)}: only a "
                "caught-up replica can take over without losing acknowledged messages"
            )
        handover = json.dumps({"to": to, "epoch": self.epoch}).encode()
        await self.etcd.put(self._key("transfer"), handover)
        term = self.epoch
        await self._hand_over()
        wait_s = self.timing.handover_wait_s
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            entry = await self.etcd.get(self._key("master"))
            if entry is not None:
                master = json.loads(entry.value)
                if master["epoch"] > term:
                    self.restart(f"handed over to replica {master['id']}")
                    return int(master["id"]), int(master["epoch"])
            await asyncio.sleep(self.timing.poll_s / 2)
        self.restart("handed over, but no replica took over in time")
        raise FailedPreconditionError(
            f"no replica took over within {wait_s:.0f} s; this broker restarts as a "
            "replica and the group elects a master as after a failure"
        )

    async def _hand_over(self) -> None:
        self._stepping_down = True
        ha = self.store.ha_master
        deadline = time.monotonic() + self.timing.handover_wait_s
        end = self.store.commit_log_end()
        while time.monotonic() < deadline and ha is not None:
            acked = [r.acked for r in ha.replicas() if r.broker_id in self._sss]
            if not acked or min(acked) >= end:
                break
            await asyncio.sleep(0.05)
        with contextlib.suppress(Exception):
            await self.etcd.revoke(self._lease)
        self.is_master = False
        log.info("handed over: lease of term %d revoked", self.epoch)

    @property
    def leads(self) -> bool:
        """Master with its store promoted (``is_master`` comes first: promotion dispatches the
        whole log, up to 60 s). What may answer for the group's partitions: a Kafka produce
        let in before checked its idempotent producers against a log half dispatched."""
        return self.is_master and self._promoted and not self._stepping_down

    def _step_down(self, reason: str) -> None:
        if self._stepping_down:
            return
        self._stepping_down = self._term_lost = True
        log.warning("stepping down as master of term %d: %s; restarting as a replica", self.epoch,
                    reason)  # fmt: skip
        self.restart(f"stepped down: {reason}")

    def _say(self, line: str) -> None:
        """Log a state line once (the loop repeats every POLL_S)."""
        if line != self._said:
            self._said = line
            log.info("%s", line)

    def _key(self, name: str) -> bytes:
        return (self._prefix + name).encode()
