"""Tests of worker.service: the arq worker that outlives Redis outages and stops cleanly."""
