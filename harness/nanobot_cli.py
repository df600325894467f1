"""Driving the real nanobot's command line from tests: finding its executable and Python, and `nanobot agent` turns."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import forks
from harness.sandbox import NanobotHome

# What scripts/test makes; NANOBOT_BIN points elsewhere.
DEFAULT_NANOBOT_BIN = Path(__file__).resolve().parents[1] / ".venv-nanobot" / "bin" / "nanobot"
# The heading nanobot puts above an archived summary in the history it sends.
ARCHIVED = "[Archived Context Summary]"


def find_nanobot() -> Path:
    """NANOBOT_BIN (scripts/test sets it) must exist if set; else the project's .venv-nanobot; else skip."""
    configured = os.environ.get("NANOBOT_BIN")
    if configured:
        path = Path(configured)
        if not path.is_file():
            pytest.fail(f"NANOBOT_BIN={configured} does not exist", pytrace=False)
        return path
    default = Path(DEFAULT_NANOBOT_BIN)
    if default.is_file():
        return default
    pytest.skip(
        "no nanobot executable: set NANOBOT_BIN to the `nanobot` of an environment with nanobot-ai "
        "and this project installed"
    )


def nanobot_python(exe: Path) -> Path:
    """The Python of nanobot's environment (scripts/test sets NANOBOT_PYTHON)."""
    configured = os.environ.get("NANOBOT_PYTHON")
    return Path(configured) if configured else exe.parent / "python"


@dataclass
class Turn:
    returncode: int
    stdout: str
    stderr: str


def agent_turn(
    exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str, argv_prefix: list[str] | None = None
) -> Turn:
    """One `nanobot agent -m` turn (blocking: call through asyncio.to_thread): `argv_prefix` wraps the command line.

    A fork of nanobot's fork server where the tests switched forks on (harness/forks.py): the same console script with
    the same arguments and environment, for a tenth of the CPU; a wrapped command line is a process of its own."""
    args = ["agent", "-c", str(home.config_path), "-s", key, "-m", text, "--no-markdown"]
    done = forks.run((argv_prefix or [str(exe)]) + args, env, timeout=120)
    return Turn(done.returncode, done.stdout, done.stderr)


async def turn(exe: Path, home: NanobotHome, env: dict[str, str], key: str, text: str) -> Turn:
    """One turn that must succeed."""
    result = await asyncio.to_thread(agent_turn, exe, home, env, key, text)
    assert result.returncode == 0, f"nanobot agent failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return result
