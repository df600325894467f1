"""Tests of the worker, by package."""
