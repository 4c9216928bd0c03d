"""``wharf bench produce|consume|e2e``: the SDK's load generator (the programs that compare Wharf with peers live in ``tests/bench``)."""
