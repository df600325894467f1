"""Tests of nanobot_hooks.contract: the queue's operations on a real Redis."""
