"""nanobot's own Python environment as seen from the worker.

Which interpreter runs nanobot, and what its entry points load when it starts, probed isolated from the current folder
(`python -I` in an empty temporary folder), so a checkout or an egg-info lying where the command runs cannot make the
hooks look installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOOKS_DIST = "nanobot-summary-hooks"
# Before 0.2.0 the hooks were installed as a distribution of this name (it held only nanobot_hooks).
OLD_DIST = "nanobot-summary-worker"

PROBE = """\
import importlib.metadata as m, json
found = {"versions": {}, "loaded": [], "errors": {}}
for name in ("nanobot-ai", %r, %r):
    try:
        found["versions"][name] = m.version(name)
    except m.PackageNotFoundError:
        found["versions"][name] = None
try:  # the hooks' contract (none before 0.2.0, whose hooks have no version module)
    from nanobot_hooks.contract.version import CONTRACT
    found["contract"] = CONTRACT
except Exception:
    found["contract"] = None
for entry in m.entry_points(group="nanobot.tools"):
    try:
        entry.load()
        found["loaded"].append(entry.name)
    except Exception as exc:
        found["errors"][entry.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
""" % (HOOKS_DIST, OLD_DIST)


class NanobotEnvError(Exception):
    """nanobot's environment cannot be found or run: the message says which, and what to do."""


@dataclass(frozen=True)
class Probe:
    """What nanobot's interpreter finds installed and loads, as nanobot itself would at start-up."""

    python: Path
    versions: dict[str, str | None]
    loaded: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    contract: int | None = None  # the installed hooks' CONTRACT (None: hooks from before 0.2.0, or none)

    @property
    def nanobot(self) -> str | None:
        return self.versions.get("nanobot-ai")

    @property
    def hooks(self) -> str | None:
        """The hooks' version, from this release's distribution or the one before 0.2.0."""
        return self.versions.get(HOOKS_DIST) or self.versions.get(OLD_DIST)

    @property
    def hooks_load(self) -> bool:
        return self.hooks is not None and "summary_worker" in self.loaded


def shebang_python(command: Path) -> Path | None:
    """The interpreter a console script's first line names (`#!/path/to/venv/bin/python`)."""
    try:
        first = command.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    return Path(words[0]) if words else None


def tool_venvs() -> list[Path]:
    """Where pipx and `uv tool` keep nanobot's venv when it was installed with them."""
    home = Path.home()
    pipx = Path(os.environ.get("PIPX_HOME") or home / ".local" / "share" / "pipx") / "venvs" / "nanobot-ai"
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    uv = Path(os.environ.get("UV_TOOL_DIR") or data / "uv" / "tools") / "nanobot-ai"
    return [pipx, uv]


def find_python(given: str | None) -> Path:
    """nanobot's interpreter: given, else the `nanobot` command's shebang, else a pipx or uv tool venv."""
    if given:
        if not Path(given).exists():
            raise NanobotEnvError(
                f"{given} does not exist: name nanobot's Python with --python "
                "(the first line of `head -1 $(command -v nanobot)`)"
            )
        return Path(given)
    command = shutil.which("nanobot")
    if command and (python := shebang_python(Path(command))) and python.exists():
        return python
    for venv in tool_venvs():
        if (venv / "bin" / "python").exists():
            return venv / "bin" / "python"
    raise NanobotEnvError(
        "nanobot's Python not found (no `nanobot` command on PATH, no pipx or uv tool venv): "
        "name it with --python /path/to/nanobot's/bin/python"
    )


def run_isolated(python: Path, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """nanobot's interpreter run isolated, in an empty temporary folder.

    nanobot's interpreter with `-I` (no current folder, no PYTHON* variables, no user site) in an empty temporary
    folder: what it imports is what its environment holds, nothing else."""
    with tempfile.TemporaryDirectory(prefix="nanobot-summary-probe-") as neutral:
        return subprocess.run([str(python), "-I", *args], capture_output=True, text=True, timeout=timeout, cwd=neutral)


def probe(python: Path) -> Probe:
    """Load nanobot's `nanobot.tools` entry points in its own interpreter, isolated."""
    try:
        result = run_isolated(python, ["-c", PROBE])
        found: dict[str, Any] = json.loads(result.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise NanobotEnvError(
            f"cannot run nanobot's Python {python} ({type(exc).__name__}): name the right one with --python"
        ) from exc
    contract = found.get("contract")
    return Probe(
        python, found["versions"], found["loaded"], found["errors"], contract if isinstance(contract, int) else None
    )
