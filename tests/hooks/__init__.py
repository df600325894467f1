"""Tests of nanobot_hooks, the side loaded inside nanobot, by package."""
