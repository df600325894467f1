"""The `recall` tool: what a query asks for (query), the hits and the answer (answer, both pure), the search of
the worker's index (search), and the tool nanobot loads (tool)."""
