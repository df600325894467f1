"""The two wheels built from this repository and installed into fresh venvs, used from a folder that is not the
checkout: the worker's command says its version and runs a real job through litellm; the hooks put into a fresh
nanobot 0.3.5 environment by `nanobot-summary hooks install`, from a folder that is
not the checkout: nanobot's packages unchanged, its entry points loading the hooks; `hooks uninstall` then takes
out the hooks and what they brought, and leaves nanobot whole."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import summary_json
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import load_record
from nanobot_hooks.contract.version import RELEASE
from tests.support.paths import ROOT

# With test_design's wheels and test_nanobot_e2e's dry run of the hooks' install: one process at a time.
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


def hooks(action: str, python: Path, cwd: Path, *more: str,
          command: tuple[str, ...] = (sys.executable, "-m", "worker")) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, "hooks", action, "--python", str(python), *more],
                          capture_output=True, text=True, timeout=900, cwd=cwd, env=process_env(test_defaults=False))


def nanobot_starts(python: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """nanobot's own tool loader, as every agent loop runs it at start-up, in its Python isolated from `cwd`."""
    probe = ("import json\nfrom nanobot.agent.tools.loader import ToolLoader\n"
             "print(json.dumps(sorted(ToolLoader()._discover_plugins())))\n")
    return subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_hooks_install_then_uninstall_in_a_fresh_nanobot(fresh_nanobot: Path, installed_worker: Path, wheels: Path,
                                                         tmp_path: Path) -> None:
    """With the installed worker's command and the hooks' wheel: no checkout involved."""
    before = packages(fresh_nanobot)
    assert before["nanobot-ai"] == "0.3.5"
    (hooks_wheel,) = wheels.glob("nanobot_summary_hooks-*.whl")
    installed = hooks("install", fresh_nanobot, tmp_path, "--from", str(hooks_wheel), command=(str(installed_worker),))
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

    removed = hooks("uninstall", fresh_nanobot, tmp_path, command=(str(installed_worker),))
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


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both wheels (`pip wheel --no-deps`, as the README builds them)."""
    out, source = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("source") / "checkout"
    # From a copy: the checkout's build/ and egg-info are shared with the other test processes.
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".venv*", ".git",
                                                                ".mypy_cache"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
                            str(source / "hooks"), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed_worker(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's wheel with its dependencies in a new venv (about 30 s here with pip's cache warm): its command."""
    folder = tmp_path_factory.mktemp("worker-env") / "venv"
    venv.EnvBuilder(with_pip=True).create(folder)
    (wheel,) = wheels.glob("nanobot_summary_worker-*.whl")
    done = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", "--find-links", str(wheels), str(wheel)],
                          capture_output=True, text=True, timeout=900, cwd=wheels)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "bin" / "nanobot-summary"


def test_the_installed_worker_says_its_version_from_any_folder(installed_worker: Path, tmp_path: Path) -> None:
    result = subprocess.run([str(installed_worker), "--version"], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=process_env(test_defaults=False))
    assert result.returncode == 0 and result.stdout.strip() == f"nanobot-summary {RELEASE}", \
        result.stdout + result.stderr


async def test_the_installed_worker_summarizes_a_session_through_litellm(installed_worker: Path, nanobot_home,
                                                                         fake_llm, redis, redis_url,
                                                                         tmp_path: Path) -> None:
    import asyncio

    fake_llm.default = Reply(summary_json(summary="done by the installed worker"))
    nanobot_home.write_session("telegram:42", conversation(15))
    env = process_env(nanobot_home, redis_url, config=True)
    for args in (["enqueue", "--keep", "messages:10", "telegram:42"], ["run", "--burst", "--no-embedded-redis"]):
        done = await asyncio.to_thread(subprocess.run, [str(installed_worker), *args], capture_output=True,
                                       text=True, timeout=300, cwd=tmp_path, env=env)
        assert done.returncode == 0, (args, done.stdout + done.stderr)
    record = await load_record(redis, "telegram:42")
    assert record is not None and record.summary == "done by the installed worker", record
    assert fake_llm.requests, "the summary came from the model, over HTTP"
