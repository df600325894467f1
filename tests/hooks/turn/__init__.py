"""Tests of nanobot_hooks.turn: the trigger decision and the pickups."""
