"""Where the checkout is, for tests that run its commands or read its files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The hooks' package, at the top level; its folder is also their distribution's (nanobot_hooks/pyproject.toml).
HOOKS = ROOT / "nanobot_hooks"
