"""The one contract between nanobot and the worker, exported here (the worker imports nothing else of the hooks
but their settings): Redis names (`keys`), what travels through Redis (`records`, signed with the instance's
key) and the operations on it (`queue`), the Redis URL and client (`redis_url`, `client`), nanobot"s session-file
format (`session_format`), the line-1 marker of a session file (`marker`) and the recall index"s layout (`recall`).

The queue and the clients import arq and redis-py: they load at first use, so nanobot with the integration
switched off (it reads only the settings) loads neither."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_hooks.contract.keys import (JOB_DAILY, JOB_IDLE, JOB_SUMMARIZE, KEY_PREFIX, NAMESPACE_FROM_ID,
                                         NAMESPACE_PATTERN, WORKSPACE_ID_FILE, Keys, default_namespace)
from nanobot_hooks.contract.marker import METADATA_KEY, AppliedMark, SessionMarker
from nanobot_hooks.contract.recall import (BLOCK_BYTES, CJK_LETTERS, CJK_RUN, HAN, HANGUL, KANA, NOTE_LINE_BITS,
                                           RECALL_INDEX, RECALL_SCHEMA_VERSION, RECALL_TABLES, RETIRED_SOURCE,
                                           SOURCE_BITS, Passage, cjk_grams, fts_problem, index_text, pack,
                                           retired_source, source_owner, unpack)
from nanobot_hooks.contract.records import (RECORD_KEY_FILE, Reason, SummarizeRequest, SummaryRecord, record_key,
                                           utcnow)
from nanobot_hooks.contract.session_format import (INTERNAL_SESSION_PREFIXES, LAST_SUMMARY, LAST_USAGE,
                                                   METADATA_TYPE, NOT_A_TURN_FLAGS, NOTED_SUFFIX,
                                                   PROVIDER_STATE_TYPE, RETIRED_FOLDER, SESSION_FILES_LOCK, SESSION_SUFFIX, channel_of, content_text,
                                                   is_direct_chat, is_hidden, is_internal_session, is_user_turn,
                                                   key_from_name, last_context_tokens, retired_key, retired_name,
                                                   storage_name, summary_text, timestamp_before, tool_calls)
from nanobot_hooks.contract.redis_url import SENTINEL_SCHEME, SentinelTarget, redacted_url, sentinel_target
from nanobot_hooks.contract.version import (BEFORE_CONTRACT, CONTRACT, CONTRACT_FIELD, HOOKS_INSTALL, RELEASE,
                                           RELEASE_FIELD, Mismatch, release_order, version_mismatch, versions_of)

if TYPE_CHECKING:
    from nanobot_hooks.contract.queue import (CONTEXT_DAYS, CONTEXT_KEPT, RECORD_SECONDS, REPLICA_WAIT_MS,
                                              UNREADABLE, context_history, drop_record, enqueue_idle_check,
                                              enqueue_summary, load_record, load_record_or_drop, note_context,
                                              pending_sessions, reply, store_record)
    from nanobot_hooks.contract.client import open_client, sync_client

# What loads at first use (arq and redis-py), by module.
_LAZY_MODULES = {
    "queue": ("CONTEXT_DAYS", "CONTEXT_KEPT", "RECORD_SECONDS", "REPLICA_WAIT_MS", "UNREADABLE", "context_history",
              "drop_record", "enqueue_idle_check", "enqueue_summary", "load_record", "load_record_or_drop",
              "note_context", "pending_sessions", "reply", "store_record"),
    "client": ("open_client", "sync_client"),
}
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BEFORE_CONTRACT", "CONTRACT", "CONTRACT_FIELD", "HOOKS_INSTALL", "Mismatch", "RELEASE", "RELEASE_FIELD",
    "release_order", "version_mismatch", "versions_of",
    "AppliedMark", "BLOCK_BYTES", "CJK_LETTERS", "CJK_RUN", "CONTEXT_DAYS", "CONTEXT_KEPT", "HAN", "HANGUL",
    "INTERNAL_SESSION_PREFIXES", "JOB_DAILY", "JOB_IDLE", "JOB_SUMMARIZE", "KANA", "KEY_PREFIX", "Keys",
    "LAST_SUMMARY", "LAST_USAGE", "METADATA_KEY", "METADATA_TYPE", "NAMESPACE_FROM_ID", "NAMESPACE_PATTERN",
    "NOTE_LINE_BITS", "NOT_A_TURN_FLAGS", "NOTED_SUFFIX", "PROVIDER_STATE_TYPE", "Passage", "RECALL_INDEX", "RECALL_SCHEMA_VERSION",
    "RECALL_TABLES", "RECORD_KEY_FILE", "RECORD_SECONDS", "REPLICA_WAIT_MS", "RETIRED_FOLDER", "RETIRED_SOURCE", "Reason",
    "SENTINEL_SCHEME", "SESSION_FILES_LOCK", "SESSION_SUFFIX", "SOURCE_BITS", "SentinelTarget", "SessionMarker",
    "SummarizeRequest", "SummaryRecord", "UNREADABLE", "WORKSPACE_ID_FILE", "channel_of", "cjk_grams", "content_text",
    "context_history", "default_namespace", "drop_record", "enqueue_idle_check", "enqueue_summary", "fts_problem",
    "index_text", "is_direct_chat", "is_hidden", "is_internal_session", "is_user_turn", "key_from_name",
    "last_context_tokens", "load_record", "load_record_or_drop", "note_context", "open_client", "pack",
    "pending_sessions", "record_key", "redacted_url", "reply", "retired_key", "retired_name", "retired_source",
    "sentinel_target", "source_owner", "storage_name", "store_record",
    "summary_text", "sync_client", "timestamp_before", "tool_calls", "unpack", "utcnow",
]
