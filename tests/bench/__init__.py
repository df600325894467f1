"""Smoke runs of the benchmarks in bench/ (figures printed, not timed)."""
