"""Compiled accelerators, built by ``pip install -e .`` (all metadata is in pyproject.toml).

Every extension is optional: without a C compiler, zlib headers or Python headers the install
still succeeds and the pure-Python code paths are used (``WHARF_NO_SPEEDUPS=1`` forces them).
"""

from setuptools import Extension, setup

EXTENSIONS = [
    # The producer's batch record encoder (client.record_encoder uses it when present).
    Extension(
        "store._record_encoder",
        ["store/_record_encoder.c"],
        libraries=["z"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
    # The broker's send-batch check and patch (store.record_check uses it when present).
    Extension(
        "store._record_check",
        ["store/_record_check.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
    # The dispatch's record walk over the commit log (store.commit_log_reader uses it).
    Extension(
        "store._log_scan",
        ["store/_log_scan.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
]

setup(ext_modules=EXTENSIONS)
