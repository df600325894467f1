"""`nanobot-summary --version` and `hooks check`/doctor's probe of nanobot's environment: isolated from the current
folder, so a checkout (its package, its egg-info) where the command runs never passes for installed hooks."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness.environment import process_env
from nanobot_hooks.contract.version import RELEASE
from tests.support.paths import HOOKS, ROOT
from worker.commands.doctor import hooks_checks


def test_the_command_says_its_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "worker", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=process_env(test_defaults=False),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"nanobot-summary {RELEASE}"


@pytest.fixture
def bare_python(tmp_path: Path) -> Path:
    """A Python environment with neither nanobot nor the hooks (no pip either: nothing is installed into it)."""
    venv.EnvBuilder(with_pip=False).create(tmp_path / "venv")
    return tmp_path / "venv" / "bin" / "python"


def checkout_like(folder: Path) -> Path:
    """A folder as the checkout is after `pip install .`: the hooks' package and the metadata pip left beside it
    (the egg-info of the distribution that held the hooks up to 0.1.0, with its entry points)."""
    folder.mkdir()
    (folder / "nanobot_hooks").symlink_to(HOOKS)
    info = folder / "nanobot_summary_worker.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: nanobot-summary-worker\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[nanobot.tools]\nsummary_worker = nanobot_hooks.plugin:SummaryWorkerHooks\n"
    )
    return folder


def test_doctor_run_from_a_checkout_says_the_hooks_are_missing_from_nanobots_environment(
    bare_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(checkout_like(tmp_path / "checkout"))
    checks = hooks_checks(str(bare_python))
    missing = [c for c in checks if "the hooks are not installed in nanobot's environment" in c.what]
    assert missing and missing[0].level == "FAIL", checks
    assert f"nanobot-summary hooks install --python {bare_python}" in (missing[0].fix or ""), checks


def test_hooks_check_loads_the_installed_hooks_in_nanobots_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    nanobot_python = os.environ.get("NANOBOT_PYTHON")
    if not nanobot_python:
        pytest.skip("needs nanobot's environment (scripts/test makes it)")
    result = subprocess.run(
        [sys.executable, "-m", "worker", "hooks", "check", "--python", nanobot_python],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=process_env(test_defaults=False),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"ok hooks {RELEASE} load in nanobot 0.3.5's environment"), result.stdout
    assert "recall" in result.stdout and "summary_worker" in result.stdout


def test_hooks_check_without_nanobot_says_where_to_point_it(tmp_path: Path) -> None:
    env = {**process_env(test_defaults=False), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "worker", "hooks", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().startswith("error: nanobot's Python not found"), result.stderr
    assert "--python" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a worker process, nanobot's python or a pip run
def test_a_conflict_is_said_with_nanobots_package_and_what_the_hooks_need() -> None:
    from worker.commands.hooks import conflict

    report = (
        "ERROR: Cannot install nanobot-summary-hooks==0.2.0 because these package versions have conflicting "
        "dependencies.\n\nThe conflict is caused by:\n"
        "    nanobot-summary-hooks 0.2.0 depends on redis<6 and >=5\n"
        "    The user requested (constraint) redis==6.0.0\n\nTo fix this you could try to:\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/...\n"
    )
    assert conflict(report) == "nanobot's redis 6.0.0, where nanobot-summary-hooks 0.2.0 depends on redis<6 and >=5"
    assert (
        conflict("ERROR: Could not find a version that satisfies the requirement arq==0.28.*\n")
        == "ERROR: Could not find a version that satisfies the requirement arq==0.28.*"
    ), "no conflict: pip's last line"


def test_an_environment_of_another_user_names_the_owner_and_the_command() -> None:
    import os
    import pwd

    from worker.commands.hooks import unwritable

    other = next(user for user in pwd.getpwall() if user.pw_uid != os.getuid())
    said = unwritable("/srv/nanobot/lib/python3.12/site-packages", other.pw_uid)
    assert said.startswith(
        "cannot write nanobot's environment /srv/nanobot/lib/python3.12/site-packages: "
        f"it is {other.pw_name}'s; run this as its owner (sudo -u {other.pw_name} "
    ), said
    assert "it is read-only" in unwritable("/x", os.getuid()), "our own folder, not writable: read-only"


def test_a_refusal_names_its_real_cause() -> None:
    from worker.commands.hooks import refusal

    missing = (
        "ERROR: Could not find a version that satisfies the requirement hiredis>=3.0.0 (from versions: none)\n"
        "ERROR: No matching distribution found for hiredis>=3.0.0\n"
    )
    offline = refusal(missing, offline=True)
    assert offline.startswith("no wheel of hiredis for nanobot's Python is at hand (nothing was changed)"), offline
    assert "no package index was asked" in offline and "without changing its packages" not in offline, offline
    online = refusal(missing, offline=False)
    assert online.startswith("no package index or folder holds hiredis"), online
    clash = (
        "ERROR: Cannot install nanobot-summary-hooks==0.2.0 because these package versions have conflicting "
        "dependencies.\nThe conflict is caused by:\n    nanobot-summary-hooks 0.2.0 depends on redis<6 and >=5\n"
        "    The user requested (constraint) redis==6.0.0\nERROR: ResolutionImpossible: for help visit ...\n"
    )
    said = refusal(clash, offline=True)
    assert said.startswith("the hooks ") and "without changing its packages" in said and "redis 6.0.0" in said, said
