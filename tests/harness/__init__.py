"""Tests of the shared harness (harness/): the fake model over real HTTP."""
