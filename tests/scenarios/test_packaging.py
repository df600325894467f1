"""The two wheels built from this repository and installed into fresh venvs, used from a folder that is not the
checkout: the worker's command says its version and runs a real job through litellm; the hooks put into a fresh
nanobot 0.3.5 environment by `nanobot-summary hooks install`, from a folder that is not the checkout: nanobot's
packages unchanged, its entry points loading the hooks, a real `nanobot agent` turn running them (a job enqueued in
a real Redis); an older hooks release replaced by a newer one; `hooks uninstall` then takes out the hooks and what
they brought, and leaves nanobot whole. And what `hooks install` refuses, in one line, changing nothing: a Python
that does not exist, one without nanobot, one whose packages the hooks conflict with, one the user cannot write."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from harness.environment import process_env
from harness.fakellm import Reply
from harness.models import summary_json
from harness.nanobot_cli import turn
from harness.transcripts import conversation
from nanobot_hooks.contract.queue import load_record
from nanobot_hooks.contract.version import RELEASE
from tests.support.built import WAIT, InstalledWorker, build_wheels, clean_copy, once_per_run
from tests.support.paths import HOOKS, ROOT
from tests.support.queue_probes import queued_jobs, queued_reason


def packages(python: Path) -> dict[str, str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {item["name"].lower(): item["version"] for item in json.loads(listing.stdout)}


@pytest.fixture
def fresh_nanobot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv with pip and nanobot-ai 0.3.5 only, as a user's: made once per run, and lent to one test at a
    time (each leaves it as it found it, which the tests check). nanobot goes in through uv where scripts/test put
    it beside the tests' Python (2 s rather than pip's 20-50 s: the same files; the hooks' own installs, the
    subject here, run nanobot's pip)."""

    def make(folder: Path) -> None:
        venv.EnvBuilder(with_pip=True).create(folder / "venv")
        python = str(folder / "venv" / "bin" / "python")
        uv = Path(sys.executable).with_name("uv")
        done = subprocess.run(
            [str(uv), "pip", "install", "--quiet", "--python", python, "nanobot-ai==0.3.5"]
            if uv.exists()
            else [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "nanobot-ai==0.3.5"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            pytest.skip(f"nanobot-ai 0.3.5 cannot be installed here: {done.stderr.strip().splitlines()[-1:]}")

    folder = once_per_run(tmp_path_factory, "fresh-nanobot", make)
    with FileLock(f"{folder}.in-use.lock", timeout=WAIT):
        yield folder / "venv" / "bin" / "python"


def hooks(
    action: str,
    python: Path,
    cwd: Path,
    *more: str,
    command: tuple[str, ...] = (sys.executable, "-m", "worker"),
    offline: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`nanobot-summary hooks ACTION`; `offline`: with no package index within reach (pip's configuration ignored,
    its index a port nothing listens on)."""
    env = process_env(test_defaults=False)
    if offline:
        env = {key: value for key, value in env.items() if not key.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple")
    return subprocess.run(
        [*command, "hooks", action, "--python", str(python), *more],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env=env,
    )


def nanobot_starts(python: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """nanobot's own tool loader, as every agent loop runs it at start-up, in its Python isolated from `cwd`."""
    probe = (
        "import json\nfrom nanobot.agent.tools.loader import ToolLoader\n"
        "print(json.dumps(sorted(ToolLoader()._discover_plugins())))\n"
    )
    return subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd=cwd)


async def test_hooks_install_then_a_real_turn_then_uninstall_in_a_fresh_nanobot(
    fresh_nanobot: Path, installed_worker: InstalledWorker, tmp_path: Path, agent_home, script, redis, redis_url
) -> None:
    """With the installed worker's command, as the README's installed path runs it: no checkout, no wheel named, no
    package index. Between install and uninstall, a real `nanobot agent -m` turn of that fresh nanobot runs the
    installed hooks: it enqueues a job."""
    before = packages(fresh_nanobot)
    assert before["nanobot-ai"] == "0.3.5"
    installed = hooks("install", fresh_nanobot, tmp_path, command=installed_worker.argv, offline=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (
        f"installed nanobot-summary-hooks {RELEASE} from this worker's own environment (no package index)"
        in installed.stdout
    ), installed.stdout
    assert "none of nanobot's packages changed" in installed.stdout
    assert f"ok hooks {RELEASE} load in nanobot 0.3.5's environment" in installed.stdout, installed.stdout
    after = packages(fresh_nanobot)
    assert {name: version for name, version in before.items() if after.get(name) != version} == {}, (
        "no package nanobot holds was up- or downgraded"
    )
    assert {"nanobot-summary-hooks", "arq", "redis"} <= set(after) - set(before)
    started = nanobot_starts(fresh_nanobot, tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert {"summary_worker", "recall"} <= set(json.loads(started.stdout.strip().splitlines()[-1]))

    # A real turn of the fresh nanobot (its own `nanobot` command, no PYTHONPATH, nothing of the checkout), its
    # model the fake LLM over HTTP: the hooks it loaded enqueue a summary job into the real Redis (every user
    # message, NANOBOT_SUMMARY_INTERVAL=1).
    env = {
        key: value
        for key, value in process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="1").items()
        if key in ("PYTHONUNBUFFERED",) or not key.startswith("PYTHON")
    }  # nothing leads to the checkout
    assert await queued_jobs(redis) == 0
    await turn(fresh_nanobot.parent / "nanobot", agent_home, env, "telegram:7", "plan a day in Kyoto")
    assert await queued_jobs(redis) == 1 and await queued_reason(redis, "telegram:7") == "interval", (
        "the installed hooks ran in nanobot's turn and enqueued the session's job"
    )

    removed = hooks("uninstall", fresh_nanobot, tmp_path, command=installed_worker.argv)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert packages(fresh_nanobot) == before, "uninstall takes out what install added, and nothing else"
    started = nanobot_starts(fresh_nanobot, tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert not {"summary_worker", "recall"} & set(json.loads(started.stdout.strip().splitlines()[-1]))
    check = hooks("check", fresh_nanobot, tmp_path)
    assert check.returncode == 1 and "the hooks are not installed in nanobot's environment" in check.stdout


@pytest.fixture(scope="module")
def older_hooks_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hooks' wheel of an earlier release (this source, its version set back to 0.1.9)."""
    out = tmp_path_factory.mktemp("old-dist")
    source = clean_copy(HOOKS, tmp_path_factory.mktemp("old-source") / "nanobot_hooks")
    version = source / "contract" / "version.py"
    text, count = re.subn(r'^RELEASE = "[^"]*"', 'RELEASE = "0.1.9"', version.read_text(encoding="utf-8"), flags=re.M)
    assert count == 1
    version.write_text(text, encoding="utf-8")
    (wheel,) = build_wheels([source], out)
    assert wheel.name.startswith("nanobot_summary_hooks-0.1.9-"), wheel
    return wheel


def test_hooks_install_over_an_older_release_replaces_it_and_uninstall_still_takes_out_all_it_brought(
    fresh_nanobot: Path,
    installed_worker: InstalledWorker,
    project_wheels: Path,
    older_hooks_wheel: Path,
    tmp_path: Path,
) -> None:
    before = packages(fresh_nanobot)
    old = hooks("install", fresh_nanobot, tmp_path, "--from", str(older_hooks_wheel), command=installed_worker.argv)
    assert old.returncode == 0 and "installed nanobot-summary-hooks 0.1.9" in old.stdout, old.stdout + old.stderr
    (hooks_wheel,) = project_wheels.glob("nanobot_summary_hooks-*.whl")
    new = hooks("install", fresh_nanobot, tmp_path, "--from", str(hooks_wheel), command=installed_worker.argv)
    assert new.returncode == 0, new.stdout + new.stderr
    assert f"installed nanobot-summary-hooks {RELEASE}" in new.stdout and f"ok hooks {RELEASE} load" in new.stdout
    now = packages(fresh_nanobot)
    assert now["nanobot-summary-hooks"] == RELEASE, "the older release is replaced, not kept beside"
    assert {name: version for name, version in before.items() if now.get(name) != version} == {}
    removed = hooks("uninstall", fresh_nanobot, tmp_path, command=installed_worker.argv)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert packages(fresh_nanobot) == before, (
        "what the first install brought (arq, redis, ...) is still taken out after an upgrade"
    )


def test_hooks_install_refuses_a_package_the_hooks_conflict_with_and_changes_nothing(
    installed_worker: InstalledWorker, project_wheels: Path, tmp_path: Path
) -> None:
    """nanobot's environment holds a redis the hooks cannot use (6.x; they need redis<6): one line naming it,
    nothing installed (pip's dry run decides before any change)."""
    python = fake_nanobot(tmp_path / "venv", with_pip=True, extra={"redis": "6.0.0"})
    before = packages(python)
    (hooks_wheel,) = project_wheels.glob("nanobot_summary_hooks-*.whl")
    result = hooks("install", python, tmp_path, "--from", str(hooks_wheel), command=installed_worker.argv)
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, result.stderr
    assert "nothing was changed" in line and "redis" in line and "6.0.0" in line, line
    assert packages(python) == before


def test_hooks_install_into_a_python_that_does_not_exist_says_so(tmp_path: Path) -> None:
    result = hooks("install", tmp_path / "no-such-venv" / "bin" / "python", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "does not exist" in line and "--python" in line, line
    assert not (tmp_path / "no-such-venv").exists()


def test_hooks_install_into_an_environment_that_is_read_only_says_so_and_writes_nothing(tmp_path: Path) -> None:
    """nanobot's site-packages mounted read-only (a bind mount in a mount namespace of the command's own: as root,
    a read-only mode stops nothing, root writes anyway; another user cannot run this checkout's Python here): one
    line saying which folder and what to do, nothing written."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-m", "true"], capture_output=True, text=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs `unshare -m` (a mount namespace) to mount nanobot's environment read-only")
    python = fake_nanobot(tmp_path / "venv", with_pip=False)
    (site,) = (tmp_path / "venv" / "lib").glob("python3*/site-packages")
    listing = sorted(path.name for path in site.iterdir())
    command = [
        unshare,
        "-m",
        "sh",
        "-ec",
        'mount --bind -o ro "$0" "$0"; shift; exec "$@"',
        str(site),
        "--",
        sys.executable,
        "-m",
        "worker",
        "hooks",
        "install",
        "--python",
        str(python),
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**process_env(test_defaults=False), "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, done.stderr
    assert line.startswith(f"error: cannot write nanobot's environment {site}: it is read-only"), line
    assert "--python" in line
    assert sorted(path.name for path in site.iterdir()) == listing, "nothing written"


def fake_nanobot(folder: Path, with_pip: bool, extra: dict[str, str] | None = None) -> Path:
    """A venv that holds nanobot-ai 0.3.5 (and `extra`) as installed metadata only: what `hooks install`
    inspects, without a minute of installing nanobot."""
    venv.EnvBuilder(with_pip=with_pip).create(folder)
    (site,) = (folder / "lib").glob("python3*/site-packages")
    for name, version in {"nanobot-ai": "0.3.5", **(extra or {})}.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
        (info / "INSTALLER").write_text("pip\n", encoding="utf-8")
        (info / "RECORD").write_text("", encoding="utf-8")
    return folder / "bin" / "python"


def test_hooks_install_into_a_python_without_nanobot_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(folder)
    result = hooks("install", folder / "bin" / "python", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().count("\n") == 0 and "has no nanobot-ai" in result.stderr, result.stderr


def test_the_installed_worker_says_its_version_from_any_folder(
    installed_worker: InstalledWorker, tmp_path: Path
) -> None:
    result = subprocess.run(
        [str(installed_worker.command), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=process_env(test_defaults=False),
    )
    assert result.returncode == 0 and result.stdout.strip() == f"nanobot-summary {RELEASE}", (
        result.stdout + result.stderr
    )


async def test_the_installed_worker_summarizes_a_session_through_litellm(
    installed_worker: InstalledWorker, nanobot_home, fake_llm, redis, redis_url, tmp_path: Path
) -> None:
    import asyncio

    fake_llm.default = Reply(summary_json(summary="done by the installed worker"))
    nanobot_home.write_session("telegram:42", conversation(15))
    env = process_env(nanobot_home, redis_url, config=True)
    for args in (["enqueue", "--keep", "messages:10", "telegram:42"], ["run", "--burst", "--no-embedded-redis"]):
        done = await asyncio.to_thread(
            subprocess.run,
            [str(installed_worker.command), *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, (args, done.stdout + done.stderr)
    record = await load_record(redis, "telegram:42")
    assert record is not None and record.summary == "done by the installed worker", record
    assert fake_llm.requests, "the summary came from the model, over HTTP"
