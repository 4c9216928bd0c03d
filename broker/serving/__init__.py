"""What serving RPCs takes around the processors: ``rpc`` (exceptions -> statuses, timing),
``handlers`` (servicers registered with deserializers that never raise), ``reply_budget``
(unread pull replies bounded per connection), ``ready_file`` (the broker's and the
NameServer's ready file), ``probe`` (``wharf-probe``, the health check command)."""
