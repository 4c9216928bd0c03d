"""One fuzz target under atheris (started by tests.fuzz.run with the sanitizer runtime
preloaded; not meant to be run by hand): ``python -m tests.fuzz.child TARGET [libFuzzer
flags] [corpus dirs or input files]``."""

from __future__ import annotations

import sys

import atheris


def main() -> None:
    target = sys.argv.pop(1)
    from tests.fuzz.targets import TARGETS

    one_input = TARGETS[target]()  # imports and loads the instrumented module once
    # The C modules carry libFuzzer's counters (-fsanitize=fuzzer-no-link); the Python around
    # them is not instrumented (atheris.instrument_imports would trace every wharf line the
    # twins run, ~10x slower, for edges that are not under test).
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
