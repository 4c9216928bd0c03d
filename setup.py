"""Compiled accelerators, built by ``pip install -e .`` (all metadata is in pyproject.toml).

Every extension is optional: without a C compiler, zlib headers or Python headers the install
still succeeds and the pure-Python code paths are used (``WHARF_NO_SPEEDUPS=1`` forces them).
``store/_format.h`` is the record layout of ``store/format.py`` for all of them.
"""

from setuptools import Extension, setup


def accelerator(name: str, **extra: list[str]) -> Extension:
    return Extension(
        f"store.{name}",
        [f"store/{name}.c"],
        depends=["store/_format.h"],
        extra_compile_args=["-O2"],
        optional=True,
        **extra,
    )


setup(
    ext_modules=[
        # The producer's batch record encoder, send results and unique ids (client side).
        accelerator("_record_encoder", libraries=["z"]),
        # The broker's send-batch check and patch (store.record_check).
        accelerator("_record_check"),
        # The dispatch's record walk over the commit log (store.commit_log_reader).
        accelerator("_log_scan"),
    ]
)
