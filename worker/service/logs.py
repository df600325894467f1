"""The worker's log lines: the format, the redacting filter on every handler, and the payload loggers kept quiet."""

from __future__ import annotations

import logging

from worker.summarize.jobs import CURRENT_JOB
from worker.text.redact import redact


class RedactingFilter(logging.Filter):
    """Every log line the worker prints goes through worker.text.redact.

    Lines quote models, providers and conversations, and no secret value may reach a log. Each line also names the job
    it belongs to."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.job = CURRENT_JOB.get() or "-"
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


# Third-party loggers that print whole requests and answers at debug level, with their own handlers.
PAYLOAD_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore", "openai")


def quiet_and_redacted() -> None:
    """Every handler redacts; the loggers that would print payloads (conversations, keys) stay at WARNING, also with -v.

    Called again at arq's start-up, for a worker run as `arq worker.app.WorkerSettings`, whose command line gives arq's
    logger a handler of its own and leaves the rest to logging's last resort."""
    for name in PAYLOAD_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    handlers = [h for name in ("", "arq", *PAYLOAD_LOGGERS) for h in logging.getLogger(name).handlers]
    for handler in [*handlers, logging.lastResort]:
        if handler is not None and not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
