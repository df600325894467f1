"""Artefacts built once per test run and shared by every test process (pytest-xdist's included), whatever the
scheduler does: the first process to ask builds, under a file lock; the others wait on the lock and reuse it.

`xdist_group` with `--dist loadgroup` used to keep the tests of one artefact in one process; pytest 9.2 made
node ids structured and xdist's grouping (which rewrites them) silently stopped taking effect
(pytest-dev/pytest-xdist#1386), so nothing here relies on which process runs which test."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this run shares: the parent of xdist's per-process base folders, or this
    process's own base folder when it runs alone."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name` of this run, filled by `build(folder)` the first time any process asks for it. A build
    that fails leaves no folder behind (the next test asking tries again and reports its own failure)."""
    root = run_folder(tmp_path_factory)
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder
