"""The resolver benchmark (bench/bench_resolver.py) at its smoke size: one gateway turn and one `nanobot agent`
run in each of its three conditions, each answered, and every figure printed. How long they took is the
benchmark's to report, never asserted here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.bench import load_bench

SECONDS = r" +(\d+\.\d\d)"
DELTA = r" +([+-]\d+\.\d\d)"


def test_a_smoke_run_times_every_condition_through_the_gateway_and_the_agent(
    nanobot_exe: Path, tmp_path: Path, capsys
) -> None:
    bench = load_bench("bench_resolver")
    code = bench.main(
        ["--turns", "1", "--agent-runs", "1", "--pause", "0.2", "--warmup", "0", "--work", str(tmp_path / "run")]
    )
    out, err = capsys.readouterr()
    assert code == 0, f"{out}\n{err}"
    for name in ("up", "down", "hung"):
        # Its turn and its agent run both answered (1/1): p50, max, and the difference to Redis down each; the stop.
        columns = rf"1/1{SECONDS}{SECONDS}{DELTA}"
        row = re.search(rf"^{name} +{columns} +{columns}{SECONDS}$", out, re.MULTILINE)
        assert row, f"no figures for {name}:\n{out}"
        if name == "down":
            assert float(row[3]) == float(row[6]) == 0.0, "down is the baseline"
    hung = re.search(
        r"^look-ups of redis\.hung\.invalid \(each one hangs\): (\d+) in (\d+) processes", out, re.MULTILINE
    )
    assert hung and int(hung[2]) == 2, f"the hang reached the gateway and the agent run:\n{out}"
    assert re.search(
        r"^hung resolver vs Redis down: [+-]\d+\.\d\d s per turn at p50, [+-]\d+\.\d\d s at the max "
        r"\(goal <= \+0\.2 s\): (met|MISSED)$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(
        r"^nanobot agent -m hi, hung resolver vs Redis down: [+-]\d+\.\d\d s from start to exit", out, re.MULTILINE
    ), out
