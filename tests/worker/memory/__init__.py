"""Tests of worker.memory: daily notes, MEMORY.md, deduplication, held facts."""
