"""TLS of the broker's ports and the NameServer's: ``material`` (read and check certificate
files, settings-free, shared with the NameServer), ``config`` (the broker's files from its
settings, a development pair generated when missing), ``reload`` (replaced files served
without a restart), ``certs`` (the development certificate and its command). Light on
purpose: the NameServer imports ``material``, ``reload`` and ``certs`` without the broker."""
