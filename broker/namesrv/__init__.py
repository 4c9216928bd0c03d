"""The NameServer (``wharf-namesrv``): a stateless registry of live brokers and topic routes."""
