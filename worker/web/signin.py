"""The page's per-browser sign-ins.

A random value issued to a browser when it presents the token, kept by the page's process (its SHA-256 only), that opens
the page until it has been idle IDLE_SECONDS or lived LIFETIME_SECONDS, until that browser signs out, or until every
browser is signed out (the page's button, or `nanobot-summary web --sign-out-all`, which touches a file beside the token
file that every running page follows). A copied cookie is a key while its sign-in lives, and no longer; a restarted page
has none."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IDLE_SECONDS = 12 * 3600  # a browser left alone half a day signs in again
LIFETIME_SECONDS = 7 * 86400  # however busy, a sign-in ends after a week
MAX_SIGNINS = 1_000  # the oldest go first: memory stays bounded whatever a token holder does


def signed_out_path(token_file: Path) -> Path:
    """The file `--sign-out-all` touches, beside the token file (`web-token.signed-out`)."""
    return token_file.with_name(token_file.name + ".signed-out")


def sign_out_all(token_file: Path) -> Path:
    """Ends every sign-in of every page using `token_file`: the pages read the file's time on their next request.

    Returns the file touched."""
    path = signed_out_path(token_file)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(f"every browser signed out at {time.time():.3f}\n")
    os.utime(path)
    return path


@dataclass
class _SignIn:
    issued: float
    seen: float
    address: str  # the browser's address on a non-local bind ("" on loopback: every browser's is the machine's)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SignIns:
    """The sign-ins of one running page."""

    def __init__(
        self,
        idle: float = IDLE_SECONDS,
        lifetime: float = LIFETIME_SECONDS,
        signed_out_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.idle, self.lifetime, self.clock = idle, lifetime, clock
        self.signed_out_file = signed_out_file
        self._signins: dict[str, _SignIn] = {}
        self._signed_out_at = self._file_time()  # what the file said before this page started is old news

    def issue(self, address: str = "") -> str:
        """A new sign-in for a browser that presented the token: the cookie's value."""
        self._prune()
        value = secrets.token_urlsafe(32)
        now = self.clock()
        self._signins[_digest(value)] = _SignIn(now, now, address)
        return value

    def valid(self, value: str, address: str = "") -> bool:
        """Whether `value` is a living sign-in of a browser at `address`; it is used now (its idle time restarts)."""
        self._follow_file()
        key = _digest(value)
        found = self._signins.get(key)
        if found is None or not hmac.compare_digest(found.address, address):
            return False
        now = self.clock()
        if now - found.issued > self.lifetime or now - found.seen > self.idle:
            del self._signins[key]
            return False
        found.seen = now
        return True

    def end(self, value: str) -> None:
        self._signins.pop(_digest(value), None)

    def end_all(self) -> None:
        self._signins.clear()

    def __len__(self) -> int:
        return len(self._signins)

    def _file_time(self) -> float | None:
        if self.signed_out_file is None:
            return None
        try:
            return self.signed_out_file.stat().st_mtime
        except OSError:
            return None

    def _follow_file(self) -> None:
        """`--sign-out-all` from another process: every sign-in issued before the file's time ends."""
        at = self._file_time()
        if at is None or at == self._signed_out_at:
            return
        self._signed_out_at = at
        self._signins = {key: one for key, one in self._signins.items() if one.issued > at}

    def _prune(self) -> None:
        now = self.clock()
        self._signins = {
            key: one
            for key, one in self._signins.items()
            if now - one.issued <= self.lifetime and now - one.seen <= self.idle
        }
        while len(self._signins) >= MAX_SIGNINS:
            del self._signins[min(self._signins, key=lambda key: self._signins[key].issued)]
