"""The many-instances soak benchmark (bench/bench_instances.py) at a smoke size: three instances on one Redis for
half a simulated hour, the daily tick inside it. Every instance gets its daily run and every minute's MEMORY.md
check, nothing runs twice or for another instance, no status names another instance, no key lacks a namespace.
The counts are taken once the window's ticks have all ended, so a slow machine only makes the run longer."""

from __future__ import annotations

import json
from datetime import datetime

import arq.connections
import arq.jobs
import arq.utils
import arq.worker
import pytest

from tests.support.bench import load_bench

# Half a simulated hour of three instances: tests/conftest.py's SLOW_TIMEOUT.
pytestmark = pytest.mark.slow


def test_three_instances_get_every_tick_of_half_a_simulated_hour_and_nothing_crosses(capsys) -> None:
    clocks = [
        arq.worker.datetime,
        arq.worker.timestamp_ms,
        arq.connections.timestamp_ms,
        arq.jobs.timestamp_ms,
        arq.utils.timestamp_ms,
    ]
    code = load_bench("bench_instances").main(["--instances", "3", "--hours", "0.5", "--scale", "600"])
    stdout = capsys.readouterr().out
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert code == 0, stdout
    assert "every instance got every tick: yes" in stdout.splitlines()
    assert figures["drained"], stdout
    # Half an hour: one daily tick, thirty minute ticks and the one at start-up, for each of the three.
    assert figures["daily"] == {"expected": 3, "got": 3, "min": 1, "max": 1, "per_instance": 1}, stdout
    assert figures["minute"] == {"expected": 93, "got": 93, "min": 31, "max": 31, "per_instance": 31}, stdout
    assert figures["missed"] == figures["twice"] == figures["foreign_runs"] == 0, stdout
    assert figures["status_crossings"] == 0 and figures["own_status"] == 3, stdout
    assert figures["stray_count"] == 0 and figures["keys"] > 0, stdout
    assert [
        arq.worker.datetime,
        arq.worker.timestamp_ms,
        arq.connections.timestamp_ms,
        arq.jobs.timestamp_ms,
        arq.utils.timestamp_ms,
    ] == clocks and arq.worker.datetime is datetime, "arq's own clock is back"
