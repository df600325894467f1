"""`nanobot-summary web`: a small local web page over this instance's worker, memory and recall.

Server-rendered with aiohttp and Jinja2 (templates and CSS are files of this package, no build step): the
overview (the worker's health, the queue, outcomes, spend), MEMORY.md's facts with forget and undo, the
recall search as a chosen session would run it, and each session's outcomes and summary. It binds to
127.0.0.1 unless told otherwise, and then asks for a token; its actions are POSTs checked against CSRF
(worker.web.guard)."""
