"""The worker's Deps, built from its settings and nanobot's config.

The model, the timezone, the memory files and the recall index, and arq's time for one try."""

from __future__ import annotations

import logging
import time
from zoneinfo import ZoneInfo

from nanobot_hooks.settings import NoWorkspaceId
from worker.memory.recall_index import RecallIndex
from worker.memory.recall_index.vectors import Embedder, litellm_embed
from worker.memory.writer import MemoryFiles
from worker.model.llm import model_problems
from worker.nanobot.config import NanobotConfig, resolve_model
from worker.settings import Settings, SettingsError
from worker.summarize.deps import Deps
from worker.text.clock import zone_or_utc
from worker.text.tokens import best_counter

log = logging.getLogger("worker")


def build_deps(settings: Settings) -> Deps:
    nanobot = NanobotConfig.load(settings.config_path)
    settings = settings.for_workspace(nanobot.workspace)  # this instance's namespace: its queue and keys
    model = resolve_model(settings.summary_model, nanobot)
    fallback = (
        nanobot.with_credentials(settings.summary_fallback_model, "NANOBOT_SUMMARY_FALLBACK_MODEL")
        if settings.summary_fallback_model
        else None
    )
    for choice in (model, fallback):
        if choice is not None and (problem := model_problems(choice)[0]):
            raise SettingsError(
                f"summary model {choice.model!r} (from {choice.source}) cannot be used: {problem} "
                "Name it as provider/model, e.g. NANOBOT_SUMMARY_MODEL=deepseek/deepseek-chat"
            )
    instructions = None
    if settings.summary_prompt_file is not None:
        try:
            instructions = settings.summary_prompt_file.expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"NANOBOT_SUMMARY_PROMPT_FILE: cannot read it ({exc})") from None
    tz = notes_timezone(settings, nanobot)
    memory = MemoryFiles(
        settings.summary_workspace or nanobot.workspace,
        tz.key,
        settings.memory_max_facts,
        hold=settings.memory_write == "idle",
    )
    return Deps(
        settings=settings,
        nanobot=nanobot,
        model=model,
        fallback=fallback,
        counter=best_counter(),
        tz=tz,
        instructions=instructions,
        memory=memory,
        job_timeout=job_timeout(settings),
        recall=RecallIndex(memory.workspace, tz, passage_embedder(settings)),
    )


def passage_embedder(settings: Settings) -> Embedder | None:
    """What embeds the recall index's passages (NANOBOT_SUMMARY_EMBEDDING_MODEL), or None: words only."""
    if not settings.summary_embedding_model:
        return None
    key = settings.summary_embedding_api_key
    return Embedder(
        settings.summary_embedding_model,
        litellm_embed(
            settings.summary_embedding_model,
            settings.summary_embedding_api_base,
            key.get_secret_value() if key is not None else None,
        ),
    )


def job_timeout(settings: Settings) -> int:
    """arq's time for one try: room for several calls.

    A try that would run past it stops before the next call, keeps its finished chunks and retries
    (worker.state.progress). NANOBOT_SUMMARY_JOB_TIMEOUT sets it: arq runs the job of a killed worker again only this
    long + 10 s after it started."""
    if settings.summary_job_timeout is not None:
        return settings.summary_job_timeout
    return int(max(300, settings.summary_timeout * 6))


def notes_timezone(settings: Settings, nanobot: NanobotConfig) -> ZoneInfo:
    return zone_or_utc(settings.summary_timezone or nanobot.timezone)


def wait_for_nanobot(settings: Settings, every: float = 2.0) -> Deps:
    """`build_deps`, waiting while nanobot has not yet run with its workspace (said once).

    The instance's namespace comes from the id nanobot writes at its first run, and a worker may well be started
    first."""
    said = False
    while True:
        try:
            return build_deps(settings)
        except NoWorkspaceId as exc:
            if not said:
                log.warning("%s; waiting for it", exc)
                said = True
            time.sleep(every)
