"""The page's safety: who may look, and which POSTs are acted on.

- Bound to a loopback address, the page answers only requests whose Host names a loopback host (a web site
  whose name a DNS trick points at 127.0.0.1 is refused); bound to any other address it needs the token
  generated at start and printed once: `?token=` in the first URL, then a cookie (HttpOnly, SameSite=Strict).
- Every POST needs the form's CSRF token (an HMAC, with a secret of this process, of the browser's own random
  cookie) and, when the browser sends them, an Origin naming this page and a Sec-Fetch-Site of same-origin; it
  is refused in read-only mode.
- Every answer forbids scripts, frames and caching (Content-Security-Policy, no-store) and sends a Referer to
  this page only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

TOKEN_COOKIE = "nanobot_summary_token"  # and the port: a browser sends a host's cookies to each of its ports
BROWSER_COOKIE = "nanobot_summary_browser"
CSRF_FIELD = "csrf"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a browser send `Origin: null` with our forms
    "Cache-Control": "no-store",
}
BROWSER: ContextVar[str] = ContextVar("browser", default="")  # the requesting browser's cookie
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """127.0.0.1, ::1, localhost: only this machine can reach an address like these."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_cookie(request: web.Request) -> str:
    """The token's cookie for this page: two pages on one host (two nanobot instances) keep a token each."""
    return f"{TOKEN_COOKIE}_{urlsplit(f'//{request.host}').port or 80}"


class Refused(ValueError):
    """A set-up the page will not start with."""


@dataclass(frozen=True)
class Guard:
    """The per-process secrets and the rules of one running page."""

    local: bool  # bound to a loopback address
    read_only: bool = False
    token: str | None = None  # required from every request when set
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @classmethod
    def for_bind(cls, host: str, read_only: bool = False, token: str | None = None) -> Guard:
        """The guard of a page bound to `host`: any address but a loopback one gets a new token."""
        local = is_loopback(host)
        if not local and token is None:
            token = secrets.token_urlsafe(32)
        if not local and (not token or len(token) < 16):
            raise Refused(f"binding {host} needs a token of at least 16 characters: anyone on the network could "
                          "read the memory otherwise")
        return cls(local=local, read_only=read_only, token=token)

    def csrf_for(self, browser: str) -> str:
        return hmac.new(self.secret, b"csrf:" + browser.encode(), hashlib.sha256).hexdigest()

    def host_allowed(self, request: web.Request) -> bool:
        if not self.local:
            return True  # the token decides
        return is_loopback(urlsplit(f"//{request.host}").hostname or "")

    def token_given(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        return request.cookies.get(token_cookie(request)) or (header[7:] if header.startswith("Bearer ") else None) \
            or request.query.get("token")

    def token_ok(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        given = self.token_given(request) or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def post_problem(self, request: web.Request, form: dict[str, str]) -> str | None:
        """Why a POST is refused, or None."""
        if self.read_only:
            return "this page runs read-only (--read-only): it changes nothing"
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != request.host:
            return "the form came from another site"
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            return "the form came from another site"
        browser = request.cookies.get(BROWSER_COOKIE, "")
        if not browser or not hmac.compare_digest(form.get(CSRF_FIELD, ""), self.csrf_for(browser)):
            return "the form's CSRF token is missing or wrong: reload the page and try again"
        return None


async def form_of(request: web.Request) -> dict[str, str]:
    """A POST's form fields as text (a file upload's field is not text: it reads as empty)."""
    return {name: value if isinstance(value, str) else "" for name, value in (await request.post()).items()}


def refusal(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain", headers=HEADERS)


def see_other(location: str) -> web.Response:
    """A redirect after a POST (or to drop the token from the address): the browser GETs `location`."""
    return web.Response(status=303, headers={"Location": location})


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard: Guard = request.app[GUARD]
    if not guard.host_allowed(request):
        return refusal(403, "This page answers only to localhost, 127.0.0.1 or [::1].")
    if not guard.token_ok(request):
        return refusal(401, "This page needs the token printed when `nanobot-summary web` started "
                       "(open the URL it printed).")
    if "token" in request.query and request.method == "GET":
        # The token leaves the address bar (and history) for a cookie.
        query = {k: v for k, v in request.query.items() if k != "token"}
        response: web.StreamResponse = see_other(str(request.rel_url.with_query(query)))
        response.set_cookie(token_cookie(request), guard.token or "", httponly=True, samesite="Strict", path="/")
    else:
        browser = request.cookies.get(BROWSER_COOKIE)
        if request.method == "POST":
            # aiohttp keeps the parsed form: the handler's own `await request.post()` reads it again.
            if problem := guard.post_problem(request, await form_of(request)):
                return refusal(403, f"Refused: {problem}.")
        if browser is None:
            browser = secrets.token_urlsafe(24)
        # Each request runs in a task of its own: the variable is this request's.
        BROWSER.set(browser)
        response = await _answer(request, handler)
        if BROWSER_COOKIE not in request.cookies:
            response.set_cookie(BROWSER_COOKIE, browser, httponly=True, samesite="Strict", path="/")
    response.headers.update(HEADERS)
    return response


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer; an HTTP exception (a redirect, a 404) is an answer too."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        location = {"Location": exc.headers["Location"]} if "Location" in exc.headers else {}
        return web.Response(status=exc.status, text=exc.text, content_type="text/plain", headers=location)


GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
