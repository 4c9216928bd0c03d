"""The kit the broker and the NameServer share: TLS material and reloads, ACL accounts and
rules, the RocketMQ remoting transport, listener bounds, health, the ready file and the probe.
It imports nothing else of the broker (an import-linter contract), so ``wharf-namesrv`` runs on
it without the broker's settings, store or front ends."""
