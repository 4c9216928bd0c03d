"""Access control (``aclEnable``): who may send, read and administer.

- signature.py: RocketMQ 5's ``MQv2-HMAC-SHA1`` request signature and its clock-skew window;
- rpc_hook.py: RocketMQ 4's ``AccessKey`` / ``Signature`` extFields (the remoting port,
  ``wharf.broker.remoting.acl``, which maps its request codes to the same ``Need``s);
- rules.py: the accounts file ``<storePathRootDir>/config/plain_acl.yml`` (RocketMQ 4 shape);
- table.py: THE table from every RPC to the topic/group/admin permission it needs;
- guard.py: the check every wharf.v1 / apache.rocketmq.v2 handler runs first, and the reload
  of the file within ~1 s of a change; refusals.py: each front end's form of a refusal.

Off by default: with ``aclEnable = false`` no handler is wrapped and nothing is checked.
"""
