"""The one contract between nanobot and the worker: Redis names (`keys`), what travels through Redis
(`records`), the line-1 marker of a session file (`marker`) and the recall index's layout (`recall`)."""

from nanobot_hooks.contract.keys import (JOB_DAILY, JOB_IDLE, JOB_SUMMARIZE, KEY_PREFIX, NAMESPACE_PATTERN,
                                         WORKSPACE_ID_FILE, Keys, default_namespace)
from nanobot_hooks.contract.marker import METADATA_KEY, AppliedMark, SessionMarker
from nanobot_hooks.contract.recall import (CJK_LETTERS, CJK_RUN, HAN, HANGUL, KANA, NOTE_LINE_BITS, RECALL_INDEX,
                                           RECALL_SCHEMA_VERSION, RECALL_TABLES, SOURCE_BITS, cjk_grams, fts_problem,
                                           index_text)
from nanobot_hooks.contract.records import Reason, SummarizeRequest, SummaryRecord, utcnow

__all__ = [
    "CJK_LETTERS", "CJK_RUN", "HAN", "HANGUL", "KANA", "cjk_grams", "index_text",
    "JOB_DAILY", "JOB_IDLE", "JOB_SUMMARIZE", "KEY_PREFIX", "METADATA_KEY", "NAMESPACE_PATTERN", "NOTE_LINE_BITS",
    "RECALL_INDEX", "RECALL_SCHEMA_VERSION", "RECALL_TABLES", "SOURCE_BITS", "WORKSPACE_ID_FILE", "AppliedMark",
    "Keys", "Reason", "SessionMarker", "SummarizeRequest", "SummaryRecord", "default_namespace", "fts_problem",
    "utcnow",
]
