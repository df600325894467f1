"""The memory files a summary writes: daily notes, MEMORY.md, dedup, and the recall index."""
