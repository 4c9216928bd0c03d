"""The protocol front ends: every port a client dials, each a thin adapter over the core's typed
port (``broker/core/port.py``). ``frontend.py`` is the interface a front end implements,
``roster.py`` the list the root serves, ``frontend_kit.py`` what each one receives."""
