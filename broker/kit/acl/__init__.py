"""Access control (``aclEnable``): who may send, read and administer.

- signature.py: RocketMQ 5's ``MQv2-HMAC-SHA1`` request signature and its clock-skew window;
- rpc_hook.py: RocketMQ 4's ``AccessKey`` / ``Signature`` extFields (the remoting port,
  ``wharf.broker.kit.remoting.acl``, which maps its request codes to the same ``Need``s);
- rules.py: the accounts file ``<storePathRootDir>/config/plain_acl.yml`` (RocketMQ 4 shape);
- table.py: THE table from every RPC to the topic/group/admin permission it needs;
- refusals.py: each front end's form of a refusal; caller.py: the account a request runs as.

The check every wharf.v1 / apache.rocketmq.v2 handler runs first, and the reload of the file
within ~1 s of a change, is the front ends' ``broker/frontends/acl_guard.py``.

Off by default: with ``aclEnable = false`` no handler is wrapped and nothing is checked.
"""
