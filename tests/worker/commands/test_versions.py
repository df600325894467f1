"""The version handshake seen from the worker's side: a worker's health record carries its release and contract;
`doctor`, `status` (text and JSON) and the web page say a running nanobot's hooks of another version,
with the command that fixes it; doctor's isolated probe compares the hooks installed in nanobot's environment
with its own version."""

from __future__ import annotations

import asyncio
import json
import re
import venv
from pathlib import Path

import pytest

from harness.defaults import TEST_KEYS
from harness.environment import process_env
from nanobot_hooks.contract.records import utcnow
from nanobot_hooks.contract.version import CONTRACT, RELEASE
from tests.support.commands import check, doctor, run_in_process
from tests.support.web import served
from worker.commands.doctor import hooks_checks
from worker.state import workers

NEWER = {
    "host": "nb-new",
    "pid": 11,
    "started": 0,
    "written": 0,
    "runner": "",
    "settings": {},
    "version": "9.0.0",
    "contract": CONTRACT + 1,
}
# A nanobot whose hooks predate the handshake: their record names no version.
OLDER = {"host": "nb-old", "pid": 12, "started": 1, "written": 0, "runner": "", "settings": {}}


def one_line(text: str) -> str:
    return " ".join(text.split())


async def test_doctor_status_and_the_page_say_each_running_nanobots_hooks_of_another_version(
    nanobot_home, redis, redis_url, deps_for, settings_for, capsys
) -> None:
    """A live worker (arq's health line, as a worker writes it every 30 s, and the report the service's worker
    publishes at each beat, worker/state/workers.publish: test_doctor.py checks that a real `nanobot-summary run`
    process's carries the versions) beside two running nanobots' hooks records of other versions."""
    # No worker runs in this process: an in-process arq worker's stop now and then hung this test under load.
    await redis.set(
        f"{TEST_KEYS.queue}:health-check",
        "Nov-29 01:19:55 j_complete=0 j_failed=0 j_retried=0 j_ongoing=0 queued=0",
        ex=600,
    )
    await workers.publish(redis, {}, utcnow())
    [key] = await redis.keys(f"{TEST_KEYS.worker_prefix}*")
    record = json.loads(await redis.get(key))
    same = (
        await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url))
    ).stdout
    for nanobot in (NEWER, OLDER):  # as two running nanobots' listeners publish them
        await redis.set(TEST_KEYS.hooks(f"{nanobot['host']}:{nanobot['pid']}"), json.dumps(nanobot), ex=600)
        await redis.sadd(TEST_KEYS.index("hooks"), f"{nanobot['host']}:{nanobot['pid']}")  # as the listener indexes it
    shown = json.loads(
        (
            await asyncio.to_thread(run_in_process, capsys, "status", "--json", env=process_env(redis_url=redis_url))
        ).stdout
    )
    text = (
        await asyncio.to_thread(run_in_process, capsys, "status", env=process_env(redis_url=redis_url, COLUMNS="300"))
    ).stdout
    metrics = (
        await asyncio.to_thread(run_in_process, capsys, "status", "--prometheus", env=process_env(redis_url=redis_url))
    ).stdout
    out = (await doctor(capsys, nanobot_home, redis_url)).stdout
    async with served(settings_for()) as page:
        status, body = await page.get("/")
    assert record["version"] == RELEASE and record["contract"] == CONTRACT, record
    assert json.loads(same)["versions"] == [], "hooks and worker of one version: nothing to say"
    print(text, out, sep="\n")  # an example for the docs and the report

    newer, older = sorted(shown["versions"], key=lambda m: m["nanobot"])
    upgrade = "upgrade the worker to 9.0.0 and restart it (docs/operations.md, Upgrading)"
    assert newer["serious"] and newer["nanobot"] == "nb-new:11" and newer["fix"] == upgrade, newer
    assert f"the worker {RELEASE} (contract {CONTRACT})" in newer["what"], newer
    assert f"hooks 9.0.0 (contract {CONTRACT + 1})" in newer["what"], newer
    assert older["serious"] and older["fix"] == "nanobot-summary hooks install, then restart nanobot", older
    assert "nanobot's hooks of an unknown version (no contract number: before 0.2.0)" in older["what"], older

    assert 'nanobot_summary_version_mismatches{contract="differs"} 2' in metrics, metrics
    assert 'nanobot_summary_version_mismatches{contract="same"} 0' in metrics, metrics

    flat = one_line(text)
    assert f"VERSION MISMATCH: {newer['what']} (nanobot nb-new:11); fix: {upgrade}" in flat, text
    assert "(nanobot nb-old:12); fix: nanobot-summary hooks install, then restart nanobot" in flat, text

    level, line = check(out, "(nanobot nb-new:11")
    assert level == "FAIL" and f"fix: {upgrade}" in line, line
    level, line = check(out, "(nanobot nb-old:12")
    # The command as it runs here: `.venv/bin/nanobot-summary` from a checkout whose venv is not on PATH.
    assert level == "FAIL" and re.search(r"fix: (\S*/)?nanobot-summary hooks install, then restart nanobot", line), line

    words = one_line(body.replace("<code>", "").replace("</code>", ""))
    assert status == 200 and "Version mismatch:" in words, words
    assert f"(nanobot nb-new:11). Fix: {upgrade}" in words and "Fix: nanobot-summary hooks install" in words, words


def fake_nanobot_env(folder: Path, dist: str, version: str, contract: int | None) -> Path:
    """A Python environment holding nanobot-ai's metadata and hooks installed as `dist` at `version` (with a
    contract module when `contract` is given, as from 0.2.0): what the isolated probe reads, nothing more."""
    venv.EnvBuilder(with_pip=False).create(folder)
    [site] = folder.glob("lib/python3*/site-packages")
    for name, ver in (("nanobot_ai", "0.3.5"), (dist.replace("-", "_"), version)):
        info = site / f"{name}-{ver}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {ver}\n")
    (site / f"{dist.replace('-', '_')}-{version}.dist-info" / "entry_points.txt").write_text(
        "[nanobot.tools]\nsummary_worker = nanobot_hooks.plugin:SummaryWorkerHooks\n"
    )
    (site / "nanobot_hooks" / "contract").mkdir(parents=True)
    (site / "nanobot_hooks" / "__init__.py").write_text("")
    (site / "nanobot_hooks" / "plugin.py").write_text("class SummaryWorkerHooks:\n    pass\n")
    if contract is not None:
        (site / "nanobot_hooks" / "contract" / "__init__.py").write_text("")
        (site / "nanobot_hooks" / "contract" / "version.py").write_text(
            f"RELEASE = {version!r}\nCONTRACT = {contract}\n"
        )
    return folder / "bin" / "python"


@pytest.mark.parametrize(
    ("dist", "version", "contract", "level", "fix"),
    [
        (
            "nanobot-summary-worker",
            "0.1.0",
            None,
            "FAIL",
            "nanobot-summary hooks install --python {python}, then restart nanobot",
        ),
        ("nanobot-summary-hooks", "9.0.0", CONTRACT + 1, "FAIL", "upgrade the worker to 9.0.0 and restart it"),
        (
            "nanobot-summary-hooks",
            "0.0.1",
            CONTRACT,
            "warn",
            "nanobot-summary hooks install --python {python}, then restart nanobot",
        ),
    ],
)
def test_doctor_compares_the_hooks_installed_in_nanobots_environment_with_its_own_version(
    tmp_path: Path, dist, version, contract, level, fix
) -> None:
    python = fake_nanobot_env(tmp_path / "nanobot", dist, version, contract)
    checks = hooks_checks(str(python))
    [found] = [c for c in checks if "installed in nanobot's environment" in c.what]
    assert found.level == level and found.fix.startswith(fix.format(python=python)), checks
    said = f"contract {contract}" if contract is not None else "no contract number: before 0.2.0"
    assert f"nanobot's hooks {version} ({said})" in found.what, found.what
    assert f"the worker {RELEASE} (contract {CONTRACT})" in found.what, found.what


def test_doctor_passes_hooks_of_its_own_version(tmp_path: Path) -> None:
    python = fake_nanobot_env(tmp_path / "nanobot", "nanobot-summary-hooks", RELEASE, CONTRACT)
    [found] = hooks_checks(str(python))
    assert found.level == "ok" and found.what.startswith(f"hooks {RELEASE} installed in nanobot 0.3.5's environment")
