"""``wharf bench produce|consume|e2e`` and ``python -m client.bench.compare`` (Wharf vs Redis)."""
