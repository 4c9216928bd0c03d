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
- **Master.** The winner promotes its store (``MessageStore.promote``: offsets from its queues,
  the epoch recorded before any write), publishes its HA address in ``master``, registers with
  the NameServers as id 0, and keeps its lease alive every TTL/3. It acknowledges nothing once
  ``send time of the last renewal + TTL - FENCE_MARGIN_S`` has passed (the store's write fence):
  by then etcd may have let the lease go and a replica taken over. It grows ``sss`` with
  replicas that caught up (after requiring their acknowledgements) and shrinks it with replicas
  that fell behind for haMaxTimeSlaveNotCatchup (before it stops waiting for them), each change
  a transaction conditioned on its own ``master`` key and the set's revision.
- **Stepping down.** A master that finds ``master`` gone or someone else's, or its lease lost,
  restarts the process (``restart``): it comes back as a replica, follows the new master,
  truncates what it wrote that the group never acknowledged (crash-safe, before recovery:
  ``wharf.store.ha.truncation``) and catches up. On SIGTERM a master stops taking writes, waits
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
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import aetcd.exceptions
from wharf.broker.errors import FailedPreconditionError

log = logging.getLogger(__name__)

POLL_S = 0.2
RANK_DELAY_S = 0.3
FENCE_MARGIN_S = 1.0
HANDOVER_WAIT_S = 5.0
TRANSFER_PRIORITY_RANKS = 5  # a named successor gets ~1.5 s before the others campaign
SSS_CHECK_S = 0.1  # a local check; etcd is written only on a change
ETCD_TIMEOUT_S = 2
# gRPC's reconnect backoff starts at 1 s and grows x1.6 per failed attempt (to 120 s): after
# ~6-12 s without etcd its next attempt came 3-4 s after etcd was back (measured), while etcd
# gives a lease only its TTL (+ ~1 s) from its restart: a master lost its key to a lapse it could
# have prevented and stepped down. Capped at 0.5 s, it reaches etcd within ~0.5 s of its return.
ETCD_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 500,
}
RENEW_RETRY_S = 0.25  # after a failed renewal (TTL/3, 1 s by default, between good ones)


class Failover:
    def __init__(
        self,
        *,
        endpoints: list[str],
        cluster: str,
        broker_name: str,
        broker_id: int,
        address: str,
        ttl_ms: int,
        wished_role: str,
        store: Any,
        on_master: Callable[[], Awaitable[None]],
        restart: Callable[[str], None],
    ) -> None:
        """``store``: the MessageStore (promote, replica_redial, set_write_fence, ha_master);
        ``on_master()``: this broker became the master (the controller re-registers it as
        id 0); ``restart(reason)``: restart the process as a replica."""
        self._endpoints = endpoints
        self._prefix = f"/wharf/{cluster}/{broker_name}/"
        self.broker_id = broker_id
        self.address = address
        self.ttl_s = max(2, ttl_ms // 1000)
        self.wished_role = wished_role
        self.store = store
        self.on_master = on_master
        self.restart = restart
        self.client: aetcd.Client | None = None
        self.master_ha = ""  # the master's HA address, as a replica follows it
        self.master_id = 0
        self.epoch = 0  # the term this broker is master of (0 = not master)
        self.is_master = False
        self._lease: Any = None
        self._create_revision = 0  # of our master key
        self._sss_revision = 0
        self._sss: set[int] = set()
        self._renewed_until = 0.0  # monotonic: acknowledge nothing after it
        self._tasks: list[asyncio.Task[None]] = []
        self._stepping_down = False
        self.elections_won = 0
        self.last_error = ""
        self._said = ""

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        # aetcd dials one target; gRPC's ipv4: URI lists them all (cluster.md, section 3).
        first, _, port = self._endpoints[0].rpartition(":")
        if len(self._endpoints) > 1:
            first = "ipv4:" + ",".join(self._endpoints)
        self.client = aetcd.Client(
            host=first, port=int(port), timeout=ETCD_TIMEOUT_S, options=ETCD_CHANNEL_OPTIONS
        )
        self.store.set_write_fence(self._fence)
        self._tasks = [asyncio.create_task(self._run(), name="failover")]

    async def stop(self) -> None:
        """Hand over (a master) and stop."""
        if self.is_master:
            await self._hand_over()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()

    def _fence(self) -> str:
        if self._stepping_down:
            return "this master is handing over to a replica (or stepping down)"
        if not self.is_master:
            return ""  # a replica refuses writes anyway (NotMasterError)
        if time.monotonic() > self._renewed_until:
            return (
                "this master's etcd lease was not renewed in time: another replica may have "
                "been elected"
            )
        return ""

    # --- the loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                await self._step()
                self.last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd unreachable, a timeout: try again next poll
                reason = f"{type(exc).__name__}: {exc}"
                if reason != self.last_error:
                    log.warning("controller (etcd %s): %s", ",".join(self._endpoints), reason)
                self.last_error = reason
            await asyncio.sleep(POLL_S)

    async def _step(self) -> None:
        assert self.client is not None
        value, meta = await self._get("master")
        if self.is_master:
            mine = meta is not None and meta.create_revision == self._create_revision
            if not mine:
                self._step_down("its master key is gone or another replica's")
            return
        if value is not None:
            master = json.loads(value)
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
        assert self.client is not None
        t = self.client.transactions
        sss_value, sss_meta = await self._get("sss")
        members = sorted(json.loads(sss_value)["members"]) if sss_value else []
        if members and self.broker_id not in members:
            # Not caught up when the master last said: electing it could lose acks.
            self._say(
                f"no master, and this replica is not in the sync-state set {members}: "
                "not campaigning (an unclean election could lose acknowledged messages)"
            )
            return
        candidates = [m for m in members if m != self.master_id] or [self.broker_id]
        rank = candidates.index(self.broker_id) if self.broker_id in candidates else 0
        transfer, _ = await self._get("transfer")
        if transfer is not None:  # a handover names its successor: it goes first
            target = json.loads(transfer)["to"]
            rank = 0 if target == self.broker_id else rank + TRANSFER_PRIORITY_RANKS
        await asyncio.sleep(rank * RANK_DELAY_S + random.uniform(0, 0.05))
        if (await self._get("master"))[0] is not None:
            return
        epoch_value, epoch_meta = await self._get("epoch")
        epoch = int(epoch_value) if epoch_value else 0
        lease = await self.client.lease(self.ttl_s)
        sent = time.monotonic()
        term = epoch + 1
        compare = [t.create(self._key("master")) == 0]
        compare.append(
            t.value(self._key("epoch")) == str(epoch).encode()
            if epoch_meta is not None
            else t.create(self._key("epoch")) == 0
        )
        if sss_meta is not None:
            compare.append(t.mod(self._key("sss")) == sss_meta.mod_revision)
        master = {"id": self.broker_id, "epoch": term, "address": self.address, "ha": ""}
        won, _ = await self.client.transaction(
            compare=compare,
            success=[
                t.put(self._key("master"), json.dumps(master).encode(), lease),
                t.put(self._key("epoch"), str(term).encode()),
                t.put(
                    self._key("sss"),
                    json.dumps({"epoch": term, "members": [self.broker_id]}).encode(),
                ),
                t.delete(self._key("transfer")),
            ],
            failure=[],
        )
        if not won:
            self._say(f"lost the election for term {term}")
            with contextlib.suppress(Exception):
                await lease.revoke()
            return
        await self._become_master(lease, sent, term, master)

    async def _become_master(
        self, lease: Any, sent: float, term: int, master: dict[str, Any]
    ) -> None:
        assert self.client is not None
        self._lease = lease
        self._renewed_until = sent + self.ttl_s - FENCE_MARGIN_S
        _, meta = await self._get("master")
        self._create_revision = meta.create_revision if meta is not None else 0
        _, sss_meta = await self._get("sss")
        self._sss_revision = sss_meta.mod_revision if sss_meta is not None else 0
        self._sss = {self.broker_id}
        role_value, _ = await self._get("role")
        role = role_value.decode() if role_value else self.wished_role
        if role not in ("SYNC_MASTER", "ASYNC_MASTER"):
            role = "ASYNC_MASTER"
        if role_value is None:
            await self.client.put(self._key("role"), role.encode())
        self.epoch, self.is_master = term, True
        self.elections_won += 1
        self._tasks.append(asyncio.create_task(self._keep_lease(), name="failover-lease"))
        try:
            await self.store.promote(term, role == "SYNC_MASTER")
            ha = self.store.ha_master
            ha.require(set())  # the set is this master alone until replicas catch up
            master["ha"] = f"{self.store.config.ha_listen_host}:{ha.port}"
            await self.client.put(self._key("master"), json.dumps(master).encode(), lease)
        except Exception as exc:
            # Half a master (its HA port taken, etcd gone mid-way) serves nobody: give the
            # term back at once and come back as a replica; the group elects again.
            log.error("taking over term %d failed (%s: %s): giving it back", term,
                      type(exc).__name__, exc)  # fmt: skip
            with contextlib.suppress(Exception):
                await lease.revoke()
            self._step_down(f"could not take over term {term}")
            return
        self._tasks.append(asyncio.create_task(self._keep_sss(), name="failover-sss"))
        log.warning("elected master of %s, term %d (%s)", self._prefix, term, role)
        await self.on_master()

    async def _keep_lease(self) -> None:
        assert self.client is not None
        failures = 0
        while self.is_master:
            # Renewed: every TTL/3. Failing: soon again, so a renewal lands as soon as etcd
            # answers again (its restart gives the lease only its TTL); one log line a second.
            await asyncio.sleep(self.ttl_s / 3 if not failures else RENEW_RETRY_S)
            sent = time.monotonic()
            try:
                reply = await self.client.refresh_lease(self._lease.id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if failures % max(1, round(1 / RENEW_RETRY_S)) == 0:
                    log.warning("lease renewal failed (%s): fencing at %.1f s", exc,
                                self._renewed_until - time.monotonic())  # fmt: skip
                failures += 1
                continue
            if reply is None or reply.TTL <= 0:
                self._step_down("its lease expired")
                return
            if failures:
                log.warning("lease renewed after %d failed attempts", failures)
                failures = 0
            self._renewed_until = sent + reply.TTL - FENCE_MARGIN_S

    async def _keep_sss(self) -> None:
        """Grow the sync-state set with caught-up replicas, shrink it with lagging ones."""
        assert self.client is not None
        t = self.client.transactions
        ha = self.store.ha_master
        while self.is_master:
            await asyncio.sleep(SSS_CHECK_S)
            local = ha.in_sync_ids()
            published = self._sss - {self.broker_id}
            if local == published:
                continue
            grown = published | local
            if local - published:
                ha.require(grown)  # acks need the newcomers BEFORE etcd lists them
            wanted = local
            value = json.dumps({"epoch": self.epoch, "members": sorted({self.broker_id, *wanted})})
            ok, _ = await self.client.transaction(
                compare=[
                    t.create(self._key("master")) == self._create_revision,
                    t.mod(self._key("sss")) == self._sss_revision,
                ],
                success=[t.put(self._key("sss"), value.encode())],
                failure=[],
            )
            if not ok:
                self._step_down("its sync-state set changed under it")
                return
            _, meta = await self._get("sss")
            self._sss_revision = meta.mod_revision if meta is not None else 0
            self._sss = {self.broker_id, *wanted}
            ha.require(set(wanted))  # leavers are dropped only AFTER etcd no longer lists them
            log.info("sync-state set of term %d: %s", self.epoch, sorted(self._sss))

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
        assert self.client is not None
        handover = json.dumps({"to": to, "epoch": self.epoch}).encode()
        await self.client.put(self._key("transfer"), handover)
        term = self.epoch
        await self._hand_over()
        deadline = time.monotonic() + HANDOVER_WAIT_S
        while time.monotonic() < deadline:
            value, _ = await self._get("master")
            if value is not None:
                master = json.loads(value)
                if master["epoch"] > term:
                    self.restart(f"handed over to replica {master['id']}")
                    return int(master["id"]), int(master["epoch"])
            await asyncio.sleep(POLL_S / 2)
        self.restart("handed over, but no replica took over in time")
        raise FailedPreconditionError(
            f"no replica took over within {HANDOVER_WAIT_S:.0f} s; this broker restarts as a "
            "replica and the group elects a master as after a failure"
        )

    async def _hand_over(self) -> None:
        self._stepping_down = True
        ha = self.store.ha_master
        deadline = time.monotonic() + HANDOVER_WAIT_S
        end = self.store.commit_log_end()
        while time.monotonic() < deadline and ha is not None:
            acked = [r.acked for r in ha.replicas() if r.broker_id in self._sss]
            if not acked or min(acked) >= end:
                break
            await asyncio.sleep(0.05)
        with contextlib.suppress(Exception):
            await self._lease.revoke()
        self.is_master = False
        log.info("handed over: lease of term %d revoked", self.epoch)

    def _step_down(self, reason: str) -> None:
        if self._stepping_down:
            return
        self._stepping_down = True
        log.warning("stepping down as master of term %d: %s; restarting as a replica", self.epoch,
                    reason)  # fmt: skip
        self.restart(f"stepped down: {reason}")

    def _say(self, line: str) -> None:
        """Log a state line once (the loop repeats every POLL_S)."""
        if line != self._said:
            self._said = line
            log.info("%s", line)

    # --- etcd ----------------------------------------------------------------------------------
    def _key(self, name: str) -> bytes:
        return (self._prefix + name).encode()

    async def _get(self, name: str) -> tuple[bytes | None, Any]:
        assert self.client is not None
        result = await self.client.get(self._key(name))
        if result is None:
            return None, None
        return result.value, result
