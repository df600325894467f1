"""Driving the real nanobot from tests and benchmarks: its config, a clean environment, and a gateway."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness import forks
from harness.environment import process_env
from harness.redis_server import free_port
from harness.sandbox import NanobotHome


def write_config(home: NanobotHome, llm_url: str, ws_port: int | None = None, **defaults: Any) -> Path:
    """nanobot's config for `home`: its model and the worker's both at `llm_url`, the WebSocket channel on
    `ws_port` if given; `defaults` override `agents.defaults` (e.g. contextWindowTokens)."""
    config: dict[str, Any] = {
        "agents": {
            "defaults": {
                "workspace": str(home.workspace),
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
        # nanobot answers through "custom"; the worker's `openai/summarizer` reaches the same fake LLM.
        "providers": {
            "custom": {"apiBase": llm_url, "apiKey": "sk-fake"},
            "openai": {"apiBase": llm_url, "apiKey": "sk-fake"},
        },
    }
    if ws_port is not None:
        config["channels"] = {
            "websocket": {
                "enabled": True,
                "host": "127.0.0.1",
                "port": ws_port,
                "websocketRequiresToken": False,
                "streaming": False,
            }
        }
    home.config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return home.config_path


def nanobot_env(home: NanobotHome, redis_url: str, **settings: str) -> dict[str, str]:
    """A clean environment for nanobot with only `settings` (the benchmarks' own, not the tests' defaults)."""
    return process_env(home, redis_url, test_defaults=False, **settings)


@dataclass
class Gateway:
    """`nanobot gateway --foreground` with its WebSocket channel, driven by WebUI-style envelopes."""

    exe: Path
    home: NanobotHome
    env: dict[str, str]
    ws_port: int
    log_path: Path
    # A fork of the test process's nanobot fork server where the tests switched forks on (harness/forks.py), not
    # a process of its own. Off by default: a benchmark that measures the gateway's process itself (its DNS look-ups:
    # bench_resolver) needs one of its own even in its smoke run.
    forked: bool = False
    process: subprocess.Popen[bytes] | forks.ForkedProcess | None = None
    _log: Any = field(default=None, repr=False)

    async def start(self, timeout: float = 60.0) -> None:
        self._log = open(self.log_path, "ab")
        argv = [str(self.exe), "gateway", "-c", str(self.home.config_path), "--foreground", "-p", str(free_port())]
        if self.forked:  # nanobot imported once per test process (harness/forks.py)
            self.process = forks.popen(argv, self.env, stdout=self._log, stderr=subprocess.STDOUT)
        else:
            self.process = subprocess.Popen(
                argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"gateway exited ({self.process.returncode}):\n{self.log()[-3000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.ws_port)
                writer.close()
                return
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"gateway did not listen on {self.ws_port}:\n{self.log()[-3000:]}") from None
                await asyncio.sleep(0.1)

    async def say(self, chat_id: str, text: str, timeout: float = 60.0) -> str:
        """Send one user message to `websocket:<chat_id>` and return the final reply text."""
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{self.ws_port}/?client_id=tester") as ws:
                await ws.receive_json(timeout=timeout)  # "ready"
                await ws.send_str(json.dumps({"type": "message", "chat_id": chat_id, "content": text}))
                while True:
                    event = await ws.receive_json(timeout=timeout)
                    if event.get("event") == "message" and event.get("chat_id") == chat_id:
                        return str(event.get("text"))

    async def stop(self, timeout: float = 30.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait, 10)
        if self._log is not None:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
