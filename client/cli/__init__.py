"""The ``wharf`` command line (see :mod:`client.cli.main`)."""
