"""`arq worker.app.WorkerSettings`: the worker's arq options, read from the environment when arq asks for them
(`nanobot-summary run` is the other way in: worker.commands.run)."""

from __future__ import annotations

from typing import Any

from worker.nanobot.config import NanobotConfig
from worker.service.arq_worker import worker_options
from worker.service.build import notes_timezone
from worker.settings import load_settings


def __getattr__(name: str) -> Any:
    # `arq worker.app.WorkerSettings` works too; built on access so importing this module reads no environment.
    if name == "WorkerSettings":
        settings = load_settings()
        nanobot = NanobotConfig.load(settings.config_path)
        return worker_options(settings.for_workspace(nanobot.workspace), notes_timezone(settings, nanobot))
    raise AttributeError(name)
