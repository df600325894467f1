"""A throwaway nanobot home (config, workspace, sessions folder) laid out as nanobot 0.3.5 lays it out.

For the tests, the benchmarks and the docs' examples, which all run the real worker against it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanobot_hooks.contract.session_format import storage_name


@dataclass
class NanobotHome:
    """A nanobot config dir with a workspace, as nanobot lays them out."""

    root: Path
    config_path: Path
    workspace: Path
    sessions_dir: Path

    def write_config(self, llm_url: str, **defaults: Any) -> None:
        config = {
            "agents": {
                "defaults": {
                    "workspace": str(self.workspace),
                    "provider": "custom",
                    "model": "fake-model",
                    "contextWindowTokens": 128000,
                    "maxTokens": 1024,
                    "idleCompactAfterMinutes": 0,
                    "timezone": "UTC",
                    "dream": {"enabled": False},
                    **defaults,
                }
            },
            "providers": {"custom": {"apiBase": llm_url, "apiKey": "sk-fake"}},
        }
        self.config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def session_file(self, key: str) -> Path:
        return self.sessions_dir / storage_name(key)

    def write_facts(self, count: int, session: str = "telegram:1", day: str = "2026-11-20") -> list[str]:
        """MEMORY.md holding `count` distinct facts and their sidecar, as the worker renders its part; its merge
        is not run (5,000 facts through the dedup take minutes). Returns the facts."""
        from worker.memory.longterm import sidecar_path  # the worker's own part format, only when asked for
        from worker.memory.longterm.part import Line, Part, metas, render
        from worker.memory.longterm.sidecar import dump_meta

        texts = [f"The user keeps fact {i}: project {i * 7} runs on port {8000 + i}" for i in range(count)]
        part = Part("en", [Line(text, "configuration", 3 + i % 3, day, i, session) for i, text in enumerate(texts)])
        memory = self.workspace / "memory" / "MEMORY.md"
        memory.parent.mkdir(parents=True, exist_ok=True)
        memory.write_text(render(part) + "\n", encoding="utf-8")
        sidecar_path(memory).write_bytes(dump_meta(metas(part)))
        return texts

    def write_session(
        self, key: str, messages: list[dict[str, Any]], last_archived: int = 0, metadata: dict[str, Any] | None = None
    ) -> Path:
        """Exactly the bytes nanobot 0.3.5 writes: metadata line, then one JSON line per message."""
        head = {
            "_type": "metadata",
            "key": key,
            "created_at": "2026-11-20T09:00:00",
            "updated_at": "2026-11-20T10:00:00",
            "metadata": metadata or {},
            "last_archived": last_archived,
            "last_consolidated": last_archived,
        }
        lines = [json.dumps(head, ensure_ascii=False)] + [json.dumps(m, ensure_ascii=False) for m in messages]
        path = self.session_file(key)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    @classmethod
    def create(cls, parent: Path, llm_url: str, **defaults: Any) -> NanobotHome:
        """`<parent>/nanobot/config.json` pointing at `llm_url`, and `<parent>/workspace`."""
        root, workspace = parent / "nanobot", parent / "workspace"
        workspace_id = secrets.token_hex(16)
        (workspace / ".nanobot").mkdir(parents=True)
        (workspace / ".nanobot" / "workspace-id").write_text(workspace_id + "\n", encoding="utf-8")
        sessions_dir = root / "sessions" / workspace_id
        sessions_dir.mkdir(parents=True)
        # nanobot's own marker binding the namespace to the workspace; without it nanobot refuses the folder.
        (sessions_dir / ".workspace").write_text(f"{workspace.resolve()}\n", encoding="utf-8")
        home = cls(root, root / "config.json", workspace, sessions_dir)
        home.write_config(llm_url, **defaults)
        return home


def session_lines(home: NanobotHome, key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The session file's metadata line and its message lines, as nanobot left them."""
    lines = [json.loads(line) for line in home.session_file(key).read_text(encoding="utf-8").splitlines() if line]
    head = next(line for line in lines if line.get("_type") == "metadata")
    return head, [line for line in lines if "_type" not in line]
