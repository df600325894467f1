"""Tests of worker.state: what the jobs keep in Redis."""
