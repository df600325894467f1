"""The page's per-user secret.

A token file only the user who runs the page can read (0600, theirs), made at the first start, so the page answers only
to that user on every bind, loopback included: another local account can reach 127.0.0.1 but cannot read the file
(Jupyter asks for a token on localhost for the same reason)."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from worker.files import state_folder

MIN_TOKEN = 16  # characters: shorter is guessable


class TokenFileError(ValueError):
    """A token file the page will not use, with what to do about it."""


def default_path() -> Path:
    """`$XDG_STATE_HOME/nanobot-summary/web-token`, else `~/.local/state/nanobot-summary/web-token`."""
    return state_folder() / "web-token"


def load_or_create(path: Path) -> str:
    """The token in `path`; a new one written there (0600, in folders made 0700) when it does not exist.

    A file that is not this user's own regular file, or that others may read or write, is refused: it would be a secret
    other accounts share."""
    if not path.exists():
        _create(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, encoding="utf-8") as file:
        problem = ownership_problem(os.fstat(fd), os.geteuid())
        if problem:
            raise TokenFileError(f"the token file {path} {problem}")
        token = file.read().strip()
    if len(token) < MIN_TOKEN:
        raise TokenFileError(
            f"the token file {path} holds fewer than {MIN_TOKEN} characters: delete it and start again for a new token"
        )
    return token


def ownership_problem(info: os.stat_result, uid: int) -> str | None:
    """Why a token file with this stat may not be used by user `uid`, or None (pure)."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != uid:
        return f"belongs to another user (uid {info.st_uid}): delete it and start again"
    if info.st_mode & 0o077:
        return f"can be read or written by other users (mode {stat.S_IMODE(info.st_mode):o}): chmod 600 it"
    return None


def _create(path: Path) -> None:
    """A new token, written whole under a temporary name and linked into place.

    A second page starting at the same moment reads one token or the other, never a half-written file."""
    for folder in reversed([path.parent, *path.parent.parents]):
        if not folder.exists():
            folder.mkdir(mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(secrets.token_urlsafe(32) + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another page made it first: its token is the one
    finally:
        temporary.unlink(missing_ok=True)
