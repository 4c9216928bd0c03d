"""TLS of the broker's ports and the NameServer's, settings-free: ``material`` (read and check
certificate files), ``reload`` (replaced files served without a restart), ``contexts`` (the
asyncio listeners' SSL contexts, following reloads), ``certs`` (the development certificate and
its command). The broker finds its files from its settings in ``broker/tls_settings.py`` and
hands every front end one source (``broker/frontends/tls_source.py``)."""
