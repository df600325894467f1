"""Tests; run them with scripts/test."""
