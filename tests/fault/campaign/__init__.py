"""The fault campaign (issue 36): a controller-mode broker group in network namespaces, each
replica's store on a powerfs, under a recorded workload, with faults drawn at random (seeded)
from a table of nemeses: partitions (both ways and one way), kill -9 + restart, SIGSTOP /
SIGCONT, power cuts. Healed at the end, judged by tests/fault/checker.py, summed up per fault
kind. ``python -m tests.fault.campaign --help``; the layout: README.md of this folder."""
