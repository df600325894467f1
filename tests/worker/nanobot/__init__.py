"""Tests of worker.nanobot: nanobot's config and session files."""
