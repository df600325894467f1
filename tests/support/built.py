"""The project's two wheels and the worker installed from them, made once per test run and shared by every test and
every pytest-xdist process that needs them (a pytest plugin: tests/conftest.py names it in `pytest_plugins`).

Each artefact is built under a file lock in a folder all the processes of one run share (the parent of each
process's base temporary folder under xdist): the first process to need it builds it, the others wait and reuse
it, whatever test the scheduler gives to which process. A build that fails leaves no mark of success, so the
next test that needs it builds it again and fails with its own message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock

from harness.environment import process_env
from tests.support.dockerfile import run_with
from tests.support.paths import ROOT

# What a copy of a source folder leaves out: a local build's leftovers, caches, virtualenvs and git's own files.
NOT_SOURCE = shutil.ignore_patterns(
    "build", "*.egg-info", "__pycache__", ".venv*", ".git", ".mypy_cache", "node_modules", "dist"
)
WORKER_DOCKERFILE = ROOT / "deploy" / "worker" / "Dockerfile"
# The fixtures that build once per run (these and the test modules' own: nanobot's fresh venv, nanobot's image's
# wheel). Whichever test first needs one pays for the build in its set-up, minutes on a loaded machine, so the
# per-test timeout bounds those tests' own calls only (`func_only`): each build is bounded by its subprocesses'
# timeouts, each wait by its lock's (WAIT).
BUILT_ONCE = {"project_wheels", "installed_worker", "fresh_nanobot", "nanobot_image_wheels"}
WAIT = 1800.0


@pytest.hookimpl(trylast=True)  # after tests/conftest.py gave the slow tests their timeouts, which this keeps
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BUILT_ONCE & set(getattr(item, "fixturenames", ())):
            own = item.get_closest_marker("timeout")
            kwargs = {**(own.kwargs if own else {}), "func_only": True}
            item.add_marker(pytest.mark.timeout(*(own.args if own else ()), **kwargs), append=False)


def clean_copy(folder: Path, to: Path) -> Path:
    """A copy of the folder without build leftovers: the checkout's build/ and egg-info may be another process's
    or an older layout's, the copy this build's alone."""
    shutil.copytree(folder, to, ignore=NOT_SOURCE)
    return to


def build_wheels(folders: list[Path], out: Path) -> list[Path]:
    """The folders' wheels, without their dependencies (`pip wheel --no-deps`, as the README builds them)."""
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "-w",
            str(out),
            *map(str, folders),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return sorted(out.glob("*.whl"))


def run_folder(factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every process of this run shares: under xdist the parent of the process's own."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `make` filled, made by the first process of the run to ask and reused by every other."""
    folder = run_folder(factory) / f"built-{name}"
    done = folder / ".built"
    with FileLock(f"{folder}.lock", timeout=WAIT):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            make(folder)
            done.write_text("", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def project_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding both wheels of this checkout (the hooks' and the worker's), from a clean copy."""

    def make(out: Path) -> None:
        source = clean_copy(ROOT, out / "source")
        build_wheels([source / "nanobot_hooks", source], out)
        shutil.rmtree(source)

    return once_per_run(tmp_path_factory, "wheels", make)


@dataclass(frozen=True)
class InstalledWorker:
    """The worker installed from its wheel with its dependencies into a new virtualenv, by the worker image's
    install step as written (deploy/worker/Dockerfile, paths moved here): the command, and what the step printed."""

    prefix: Path
    wheels: Path  # the step's copy of the wheels, which it removes once installed
    output: str = field(repr=False)  # pip's lines: too long for a failing test's report

    @property
    def command(self) -> Path:
        return self.prefix / "bin" / "nanobot-summary"

    @property
    def argv(self) -> tuple[str, ...]:
        return (str(self.command),)


@pytest.fixture(scope="session")
def installed_worker(project_wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> InstalledWorker:
    """The one install of the worker (with litellm: minutes) that the image's and the packaging tests share."""

    def make(folder: Path) -> None:
        wheels = folder / "wheels"
        shutil.copytree(project_wheels, wheels, ignore=shutil.ignore_patterns(".built"))
        script = (
            run_with(WORKER_DOCKERFILE, "pip install")
            .replace("/opt/nanobot-summary", str(folder / "opt"))
            .replace("/tmp/wheels", str(wheels))
            .replace("python -m venv", f"{sys.executable} -m venv")
        )
        done = subprocess.run(
            ["sh", "-ec", script],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=900,
            env=process_env(test_defaults=False),
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (folder / "output.txt").write_text(done.stdout, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "worker-venv", make)
    return InstalledWorker(folder / "opt", folder / "wheels", (folder / "output.txt").read_text(encoding="utf-8"))
