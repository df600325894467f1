"""The wheels an installed worker carries: the hooks of its own version and what they need, rebuilt from the
distributions of its own environment, so `hooks install` needs no package index (an install for real into a fresh
venv with every index out of reach)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from harness.environment import process_env
from nanobot_hooks.contract.version import RELEASE
from worker.commands.wheels import carried_wheels, compressed


def test_the_hooks_wheel_holds_their_package_entry_points_and_needs(tmp_path: Path) -> None:
    built = carried_wheels("nanobot-summary-hooks", tmp_path, skip=["pydantic", "pydantic-settings"])
    names = {path.name.split("-")[0].lower() for path in built}
    # arq asks for redis[hiredis]: the extra's package comes too, though the hooks ask for plain redis first.
    assert {"nanobot_summary_hooks", "arq", "redis", "hiredis", "click"} <= names, names
    assert not {"pydantic", "pydantic_settings"} & names, "what nanobot holds is not carried"
    (hooks,) = [path for path in built if path.name.startswith("nanobot_summary_hooks-")]
    assert hooks.name == f"nanobot_summary_hooks-{RELEASE}-py3-none-any.whl"
    with zipfile.ZipFile(hooks) as wheel:
        listed = wheel.namelist()
        info = f"nanobot_summary_hooks-{RELEASE}.dist-info"
        assert "nanobot_hooks/plugin.py" in listed and "nanobot_hooks/contract/version.py" in listed, listed
        assert not [name for name in listed if name.endswith(".pyc") or "__editable__" in name], listed
        assert (
            "summary_worker = nanobot_hooks.plugin:SummaryWorkerHooks"
            in wheel.read(f"{info}/entry_points.txt").decode()
        )
        record = wheel.read(f"{info}/RECORD").decode()
        assert all(name in record for name in listed), "every file in the RECORD, as pip checks it"


def test_a_compressed_tag_set_names_every_platform() -> None:
    assert (
        compressed(["cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64"])
        == "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"
    )
    assert compressed(["py3-none-any"]) == "py3-none-any"


def fake_nanobot(folder: Path) -> Path:
    """A venv with pip and nanobot-ai's metadata only: what `hooks install` needs to find nanobot there."""
    venv.EnvBuilder(with_pip=True).create(folder)
    (site,) = (folder / "lib").glob("python3*/site-packages")
    info = site / "nanobot_ai-0.3.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nanobot-ai\nVersion: 0.3.5\n", encoding="utf-8")
    (info / "RECORD").write_text("", encoding="utf-8")
    return folder / "bin" / "python"


@pytest.mark.slow  # wheels built and pip run in a new venv
def test_hooks_install_needs_no_package_index(tmp_path: Path) -> None:
    python = fake_nanobot(tmp_path / "nanobot")
    # No index, no find-links from pip's configuration: an index at a port nothing listens on.
    env = {key: value for key, value in process_env(test_defaults=False).items() if not key.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple")
    command = [sys.executable, "-m", "worker", "hooks"]
    installed = subprocess.run(
        [*command, "install", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert installed.stdout.startswith(
        f"installed nanobot-summary-hooks {RELEASE} from this worker's own environment (no package index)"
    ), installed.stdout
    assert f"ok hooks {RELEASE} load in nanobot 0.3.5's environment" in installed.stdout, installed.stdout
    removed = subprocess.run(
        [*command, "uninstall", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert removed.returncode == 0 and "removed nanobot-summary-hooks, " in removed.stdout, removed.stdout
    check = subprocess.run(
        [*command, "check", "--python", str(python)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert check.returncode == 1 and "the hooks are not installed" in check.stdout, check.stdout
