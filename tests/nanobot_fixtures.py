"""Old import names of the helpers that drive the real nanobot, kept until every test imports them from
tests.support (nanobot_cli, models, environment, queue_probes, waiting, workers, sandbox, gateway)."""

from __future__ import annotations

from tests.support.environment import process_env as nanobot_env
from tests.support.gateway import Gateway, write_config
from tests.support.models import (BIG_PROMPT, SMALL_PROMPT, SUMMARY_MODEL, SUMMARY_TEXT, LLMScript, chat_requests,
                                  history_text, summarizer, system_text)
from tests.support.nanobot_cli import ARCHIVED, DEFAULT_NANOBOT_BIN, Turn, agent_turn, find_nanobot, nanobot_python, turn
from tests.support.queue_probes import has_record, queued_jobs, queued_reason, stats
from tests.support.redis_server import free_port
from tests.support.sandbox import session_lines
from tests.support.waiting import wait_until
from tests.support.workers import ProcfileWorker

__all__ = ["ARCHIVED", "BIG_PROMPT", "DEFAULT_NANOBOT_BIN", "SMALL_PROMPT", "SUMMARY_MODEL", "SUMMARY_TEXT",
           "Gateway", "LLMScript", "ProcfileWorker", "Turn", "agent_turn", "chat_requests", "find_nanobot",
           "free_port", "has_record", "history_text", "nanobot_env", "nanobot_python", "queued_jobs",
           "queued_reason", "session_lines", "stats", "summarizer", "system_text", "turn", "wait_until",
           "write_config"]
