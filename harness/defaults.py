"""The settings every test runs the worker and the hooks with, and the Redis key names they make.

The tests' sessions are a few hundred tokens: the worker summarizes whatever they save, and keeps the last 10
messages, whose boundaries the tests assert (the worker processes the tests start inherit these too). Idle
summaries are off: their deferred checks would keep a burst worker waiting and add jobs to the queue the tests
count (tests/worker/summarize/test_idle.py switches them on). MEMORY.md takes a job's facts at once, not at the
next quiet moment (the sessions the tests write are all fresh). The tests of those rules set them themselves.
One namespace for the tests' hooks, workers and `redis` client alike (tests/scenarios/test_namespace.py tests the
default, which derives it from each nanobot home's workspace id).
"""

from __future__ import annotations

import os

from nanobot_hooks.contract.keys import Keys

TEST_NAMESPACE = "test"
TEST_DEFAULTS = {
    "NANOBOT_SUMMARY_MIN_SAVING": "0",
    "NANOBOT_SUMMARY_KEEP": "messages:10",
    "NANOBOT_SUMMARY_IDLE": "false",
    "NANOBOT_MEMORY_WRITE": "now",
    "NANOBOT_SUMMARY_NAMESPACE": TEST_NAMESPACE,
    # The worker's processes keep the priority they are started with: lowered, they yield the CPU to any
    # other load on the machine, and a test's bounds would measure that load (one test checks it).
    "NANOBOT_SUMMARY_NICENESS": "0",
}
TEST_KEYS = Keys(TEST_NAMESPACE)


def apply_test_defaults() -> None:
    """Put the tests' settings into this process's environment, where the caller set none of its own."""
    for name, value in TEST_DEFAULTS.items():
        os.environ.setdefault(name, value)
