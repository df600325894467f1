"""Tests of nanobot_hooks.recall: the recall search and tool (with the worker's index they read)."""
