"""Tests of worker.commands: the nanobot-summary command line."""
