"""Benchmarks and the docs' examples: scripts that print figures side by side with the peer (`python
bench/<name>.py --help`); the suite runs a small smoke run of each."""
