"""Where the checkout is, for tests that run its commands or read its files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The hooks' package, in the folder of their own distribution (hooks/pyproject.toml).
HOOKS = ROOT / "hooks" / "nanobot_hooks"
