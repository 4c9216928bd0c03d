"""The broker's protocol-neutral messaging core (Wharf's counterpart of the RocketMQ 5 proxy's
``MessagingProcessor``): what a message operation MEANS, once, under every protocol front end.

The port: a front end asks the core through ``port.py``'s typed Protocols (``Messaging``,
``Admin``; calls that wait or depend on the caller take a ``RequestContext``), which
``processor.py``'s ``CoreProcessor`` implements (``FrontEndKit.port``): no front end reaches
the store or its transaction ledger (tests/test_structure.py fails on a ``.store`` attribute in
a front end's code), and the core itself uses only the store's public surface (``wharf.store``'s
exports, values, errors and the record codec; an import-linter contract).

Contract:
- The front ends (``broker/frontends/v1/`` = wharf.v1, ``broker/frontends/v2/`` = apache.rocketmq.v2,
  ``broker/frontends/remoting/`` = RocketMQ 4.x remoting, ``broker/frontends/kafka/``) are adapters: request -> core call -> reply.
  They own their wire types, their request shape checks and their error tables
  (``broker/errors.py`` ``status_for``, ``broker/frontends/v2/codes.py`` ``code_for``,
  ``broker/frontends/remoting/handlers.py``); the core owns admission (``SendCore.topic`` /
  ``lookup``, the shutting-down refusal included), the rules, queue selection, dedupe, the
  read and its read-your-writes wait (``ReadCore.own_writes_visible``), pop, the client registry, transactions and the store calls.
- The core speaks the store's values (``wharf.store.model``) and its own small dataclasses
  (``model.py``); it imports no generated protocol module (``wharf.v1``, ``wharf.rocketmq``)
  and no front end (an import-linter contract in pyproject.toml).
- It refuses with ``errors.Refused`` subclasses: broker errors (so ``status_for`` maps them)
  carrying a neutral ``Reason`` (so a front end with finer codes maps each rule).
- State that must be one per broker (the round-robin counters, the dedupe window) lives here,
  in the one ``SendCore`` of the broker's topic table (``SendCore.shared``).

Modules: ``port.py`` (the interface the front ends hold, and its request context),
``processor.py`` (its implementation over the store and the services below), ``send.py`` (admission, queue selection, the store calls, dedupe), ``read.py`` (the
one offset read with its neutral ``ReadStatus``), ``clients.py`` (the one client registry:
group members, sessions and their channels, one expiry), ``transactions.py`` (ending
transactions, the check-back targets every front end adds to, the check-back task),
``pop.py`` (pop consumption: group rules, DLQ registration, the pop store's calls),
``admin.py`` (topics and groups changed as every protocol's tools change them, answered once on
disk; topic statistics, a group's progress), ``retry.py`` (a consumed message sent back to
retry or to the dead letters),
``validate.py`` (the message rules; body decoding, the compression flag decided once for every
reader, is the store codec's ``bodies.py``, and the mapping of one message across every
protocol the table of broker/frontends/kafka/README.md "Mapping"), ``model.py`` (values), ``errors.py`` (refusals and
reasons), ``long_poll.py`` (parked reads), ``tags.py`` (filters), ``background.py`` (client
expiry, pop progress), ``policies.py`` (the topics' cleanup policies the store's retention and
compaction follow).
"""

from wharf.broker.core.errors import InvalidSend, Reason, Refused
from wharf.broker.core.model import Failed, Planned, SendOutcome, Stored
from wharf.broker.core.send import SendCore, group_queue, is_own_topic

__all__ = [
    "Failed",
    "InvalidSend",
    "Planned",
    "Reason",
    "Refused",
    "SendCore",
    "SendOutcome",
    "Stored",
    "group_queue",
    "is_own_topic",
]
