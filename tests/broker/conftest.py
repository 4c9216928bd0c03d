"""Fixtures for the broker tests: brokers come from the root ``daemons`` / ``inproc_broker``
factories (``tests/conftest.py``)."""
