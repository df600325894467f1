"""The `recall` tool.

What a query asks for (query), what a search finds and who sees which sources (hits), the ranking (rank) and what
the model reads (snippets), all pure; the search of the worker's index (search), and the tool nanobot loads (tool)."""
