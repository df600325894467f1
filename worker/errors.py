"""The worker's one error hierarchy. Lower-layer errors (litellm, file locks, OS) are converted where they occur.

A job sorts every failure by what to do about it:
- `RetryableError`: try the job again later (arq `Retry` with backoff);
- any other `WorkerError`: the job fails now with the message as its outcome;
- anything else is a bug: the job fails with "internal error" and a traceback in the log.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every failure the worker expects and reports in one line."""


class RetryableError(WorkerError):
    """Worth another try of the whole job later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMError(WorkerError):
    """A summarizing call did not give a usable answer."""


class TransientLLMError(LLMError, RetryableError):
    """Rate limits, server errors, timeouts, connection trouble: retry later (honouring Retry-After)."""


class PermanentLLMError(LLMError):
    """Retrying the same call will not help: a bad key, an unknown model, a rejected request."""


class CredentialsError(PermanentLLMError):
    """The provider refused the key, or there is none: no retry can help until the user fixes the key."""


class ContextTooLong(LLMError):
    """The input did not fit the model: shrink it and ask again."""


class BadAnswer(LLMError, RetryableError):
    """The model answered, but nothing usable.

    Empty, unreadable, oversized, a refusal, or a summary that lost what the previous one held."""

    def __init__(self, message: str, oversized: int | None = None, prose: bool = False) -> None:
        super().__init__(message)
        self.oversized = oversized
        self.prose = prose  # prose where JSON or lines were asked for (a notes-only call)
        self.model: str | None = None  # the model that answered, set by the caller


class OutOfTime(RetryableError):
    """The next call might not finish within the job's time: the finished chunks are kept, the job retries."""


class OverBudget(WorkerError):
    """A daily cap of summarizing tokens is reached; the session rests until the next day."""


class SummaryFailed(WorkerError):
    """The job cannot succeed by retrying; the outcome says why."""


class RecordOfAnotherVersion(WorkerError):
    """The session's waiting record was written by another version of the worker and this one cannot read it.

    It is kept for the version that can, and this job makes no summary over it (nothing paid, no rest)."""


class NanobotConfigError(WorkerError):
    """nanobot's config is missing or unreadable; the message says which file and why."""


class SessionError(WorkerError):
    """A session that cannot be read."""


class SessionKeyError(SessionError, ValueError):
    """A session key or path that cannot name a session file in the sessions folder."""


class SessionNotFound(SessionError, FileNotFoundError):
    """No file for this session key."""


class NotSummarized(SessionError):
    """A session a job is not queued for: one of nanobot's own, a bad key, or none of that name."""


class MemoryFilesError(WorkerError):
    """The memory folder could not be written (full disk, read-only, a lock held too long, a file that kept changing).

    Reported in the outcome; never fails a summary."""


class MemoryReadOnly(MemoryFilesError):
    """The user made MEMORY.md read-only: the worker leaves it alone, and the facts wait in the held file."""
