"""What a topic keeps: its cleanup policy (delete by age or size, compaction by key)."""
