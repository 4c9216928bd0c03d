"""The ``wharf`` command line (see :mod:`wharf.client.cli.main`)."""
