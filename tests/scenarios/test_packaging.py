"""The hooks put into a fresh nanobot 0.3.5 environment by `nanobot-summary hooks install`, from a folder that is
not the checkout: nanobot's packages unchanged, its entry points loading the hooks; `hooks uninstall` then takes
out the hooks and what they brought, and leaves nanobot whole."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness.environment import process_env
from nanobot_hooks.contract import RELEASE

# The hooks are built from hooks/ (its build folder), as test_design's wheel is: one process at a time.
pytestmark = pytest.mark.xdist_group("wheel")


def packages(python: Path) -> dict[str, str]:
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                             capture_output=True, text=True, timeout=120, check=True)
    return {item["name"].lower(): item["version"] for item in json.loads(listing.stdout)}


@pytest.fixture(scope="module")
def fresh_nanobot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with nanobot-ai 0.3.5 only, as a user's (about 50 s here with pip's cache warm)."""
    folder = tmp_path_factory.mktemp("nanobot-env") / "venv"
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "nanobot-ai==0.3.5"], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip(f"nanobot-ai 0.3.5 cannot be installed here: {done.stderr.strip().splitlines()[-1:]}")
    return python


def hooks(action: str, python: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "worker", "hooks", action, "--python", str(python)],
                          capture_output=True, text=True, timeout=900, cwd=cwd, env=process_env(test_defaults=False))


def nanobot_starts(python: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """nanobot's own tool loader, as every agent loop runs it at start-up, in its Python isolated from `cwd`."""
    probe = ("import json\nfrom nanobot.agent.tools.loader import ToolLoader\n"
             "print(json.dumps(sorted(ToolLoader()._discover_plugins())))\n")
    return subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_hooks_install_then_uninstall_in_a_fresh_nanobot(fresh_nanobot: Path, tmp_path: Path) -> None:
    before = packages(fresh_nanobot)
    assert before["nanobot-ai"] == "0.3.5"
    installed = hooks("install", fresh_nanobot, tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"installed nanobot-summary-hooks {RELEASE}" in installed.stdout, installed.stdout
    assert "none of nanobot's packages changed" in installed.stdout
    assert f"ok hooks {RELEASE} load in nanobot 0.3.5's environment" in installed.stdout, installed.stdout
    after = packages(fresh_nanobot)
    assert {name: version for name, version in before.items() if after.get(name) != version} == {}, \
        "no package nanobot holds was up- or downgraded"
    assert {"nanobot-summary-hooks", "arq", "redis"} <= set(after) - set(before)
    started = nanobot_starts(fresh_nanobot, tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert {"summary_worker", "recall"} <= set(json.loads(started.stdout.strip().splitlines()[-1]))

    removed = hooks("uninstall", fresh_nanobot, tmp_path)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert packages(fresh_nanobot) == before, "uninstall takes out what install added, and nothing else"
    started = nanobot_starts(fresh_nanobot, tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert not {"summary_worker", "recall"} & set(json.loads(started.stdout.strip().splitlines()[-1]))
    check = hooks("check", fresh_nanobot, tmp_path)
    assert check.returncode == 1 and "the hooks are not installed in nanobot's environment" in check.stdout


def test_hooks_install_into_a_python_without_nanobot_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(folder)
    result = hooks("install", folder / "bin" / "python", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().count("\n") == 0 and "has no nanobot-ai" in result.stderr, result.stderr
