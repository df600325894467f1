"""The recall index: archived messages, daily-notes lines and MEMORY.md lines, redacted, in SQLite FTS5.

The worker keeps it in step with the files after each job (off the turn's path); the recall tool inside
nanobot reads it (nanobot_hooks/recall/search.py). Its layout is in the contract
(nanobot_hooks/contract/recall.py).
The files stay the source of truth: an index that is missing, of another schema version or unreadable is
rebuilt from them, and every refresh follows the memory files whose size or time changed: a day file that
only grew (notes are appended) has only its new sections read, any other change re-reads the file whole.
Crash safety: WAL, and every change is one transaction that also records how far it got, so a crash
leaves the last committed state (which readers keep using) and the next refresh continues from there.
"""

from worker.memory.recall_index.index import RecallIndex, RecallIndexError, Refreshed
from worker.memory.recall_index.rows import Row, archived_through, memory_rows, note_rows

__all__ = ["RecallIndex", "RecallIndexError", "Refreshed", "Row", "archived_through", "memory_rows", "note_rows"]
