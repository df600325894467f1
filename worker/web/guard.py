"""The page's safety: who may look, and which POSTs are acted on.

- The page answers only to the user who runs it, on every bind: every request needs its token, the per-user secret
  of worker.web.tokenfile (a file only that user can read). The first-visit URL carries it (`?token=`); the page
  then signs that browser in (worker.web.signin: a random value, kept server-side, that expires when idle and
  after a lifetime, and ends at a sign-out) in a cookie (HttpOnly, SameSite=Strict, named with the port; on a
  non-local bind bound to the browser's address), and drops the token from the address. A copied cookie is a
  key only while its sign-in lives. `Authorization: Bearer TOKEN` works for scripts.
- Bound to a loopback address, the page also answers only requests whose Host names a loopback host (a web site
  whose name a DNS trick points at 127.0.0.1 is refused).
- Every POST needs the form's CSRF token (an HMAC, with a secret of this process, of the browser's own random
  cookie) and, when the browser sends them, an Origin naming this page and a Sec-Fetch-Site of same-origin; it
  is refused in read-only mode.
- Every answer, refusals and errors included, forbids scripts, frames and caching (Content-Security-Policy,
  no-store) and sends a Referer to this page only; a redirect goes to one of this page's own paths only.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web
from markupsafe import Markup
from yarl import URL

from worker.web.signin import SignIns
from worker.web.tokenfile import MIN_TOKEN

log = logging.getLogger("worker.web")
SESSION_COOKIE = "nanobot_summary_session"  # and the port: a browser sends a host's cookies to each of its ports
BROWSER_COOKIE = "nanobot_summary_browser"
CSRF_FIELD = "csrf"
MAX_BODY = 64 * 1024  # bytes of a POST: the forms carry one fact's text at most
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a browser send `Origin: null` with our forms
    "Cache-Control": "no-store",
}
SIGN_OUT = frozenset({"/sign-out", "/sign-out-all"})  # POSTs a read-only page takes too: they change no memory
PUBLIC = frozenset({"/style.css"})  # what a refusal page needs, and nothing of the instance's
BROWSER: ContextVar[str] = ContextVar("browser", default="")  # the requesting browser's cookie
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A path of this page: one slash, then no second slash or backslash (`//host`, `/\host` are other sites to a
# browser) and nothing a browser drops or reads as a separator (controls, spaces, backslashes).
_OWN_PATH = re.compile(r"/(?![/\\])[^\x00-\x20\x7f\\]*\Z")
_PAGE = Markup(
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    '<title>{title} · nanobot summary</title><link rel="stylesheet" href="/style.css"></head>\n'
    "<body><main><h1>{title}</h1>\n<p>{text}</p></main></body></html>\n"
)
NO_TOKEN = (
    "This page answers only to the user who runs it. Open the address `nanobot-summary web` printed when "
    "it started (it carries the token), or run `nanobot-summary web --url` as that user to print it."
)


def is_loopback(host: str) -> bool:
    """127.0.0.1, ::1, localhost: only this machine can reach an address like these."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_of(request: web.Request) -> int:
    return urlsplit(f"//{request.host}").port or 80


def session_cookie(request: web.Request) -> str:
    """The sign-in's cookie for this page: two pages on one host (two nanobot instances) keep one each."""
    return f"{SESSION_COOKIE}_{port_of(request)}"


def own_path(location: str) -> str:
    """`location` when it is a path of this page, else `/` (pure): no redirect leaves the page."""
    return location if _OWN_PATH.match(location) else "/"


class Refused(ValueError):
    """A set-up the page will not start with."""


@dataclass(frozen=True)
class Guard:
    """The secrets and the rules of one running page."""

    local: bool  # bound to a loopback address
    read_only: bool = False
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)  # asked of every request
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    signins: SignIns = field(default_factory=SignIns, repr=False)

    @classmethod
    def for_bind(
        cls, host: str, read_only: bool = False, token: str | None = None, signins: SignIns | None = None
    ) -> Guard:
        """The guard of a page bound to `host`, asking for `token` (the token file's; a new one when None)."""
        token = secrets.token_urlsafe(32) if token is None else token
        if len(token) < MIN_TOKEN:
            raise Refused(
                f"the page needs a token of at least {MIN_TOKEN} characters: anyone who can reach it "
                "could read the memory otherwise"
            )
        return cls(
            local=is_loopback(host), read_only=read_only, token=token, signins=SignIns() if signins is None else signins
        )

    def csrf_for(self, browser: str) -> str:
        return hmac.new(self.secret, b"csrf:" + browser.encode(), hashlib.sha256).hexdigest()

    def address_of(self, request: web.Request) -> str:
        """What a sign-in is bound to besides its value.

        On a non-local bind, the browser's address: a browser sends a host's cookies to every port of it, and a server
        on another port of the page's host that the browser visits gets the cookie; replayed from that host it opens
        nothing. (On a loopback bind every browser's address is the machine's own: nothing to bind, and the sign-in's
        expiry and sign-out are the limit.)"""
        return "" if self.local else request.remote or ""

    def host_allowed(self, request: web.Request) -> bool:
        if not self.local:
            return True  # the token decides
        return is_loopback(urlsplit(f"//{request.host}").hostname or "")

    def token_ok(self, request: web.Request) -> bool:
        cookie = request.cookies.get(session_cookie(request))
        if cookie and self.signins.valid(cookie, self.address_of(request)):
            return True
        header = request.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else request.query.get("token", "")
        return hmac.compare_digest(given.encode(), self.token.encode())

    def post_problem(self, request: web.Request, form: dict[str, str]) -> str | None:
        """Why a POST is refused, or None."""
        if self.read_only and request.path not in SIGN_OUT:
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


def refusal(status: int, text: str, title: str = "Refused") -> web.Response:
    """A small page of its own: nothing of the instance on it (it answers those without the token too)."""
    return web.Response(
        status=status, text=_PAGE.format(title=title, text=text), content_type="text/html", charset="utf-8"
    )


def see_other(location: str) -> web.Response:
    """A redirect after a POST (or to drop the token from the address).

    The browser GETs `location`, a path of this page."""
    return web.Response(status=303, headers={"Location": own_path(location)})


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The security headers on every answer the application sends.

    The security headers on every answer the application sends, aiohttp's own 413 and 500 included
    (`on_response_prepare`)."""
    response.headers.update(HEADERS)


class _PageRequest(web.Request):
    """A request whose answer gets the security headers even when the application never saw it.

    aiohttp answers a malformed request line or header (400) itself, before routing, so `on_response_prepare` is not
    sent for it (aiohttp issue #6463); that answer echoes the bytes it refused, as text/plain a browser might sniff."""

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        await add_headers(self, response)
        await super()._prepare_hook(response)


def headers_on_parser_errors(server: web.Server, app: web.Application) -> None:
    """Every request `server` (a set-up runner's) makes for `app` is a _PageRequest.

    Its parser-level 400s carry the security headers too. The connections made after this call use it (call it before
    the site starts)."""
    server.request_factory = functools.partial(app._make_request, _cls=_PageRequest)


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard: Guard = request.app[GUARD]
    if not guard.host_allowed(request):
        return refusal(403, "This page answers only to localhost, 127.0.0.1 or [::1].")
    if request.path in PUBLIC and request.method == "GET":
        return await handler(request)
    if not guard.token_ok(request):
        return refusal(401, NO_TOKEN, title="This page needs its token")
    if "token" in request.query and request.method == "GET":
        return _token_to_cookie(request, guard)
    try:
        return await _guarded(request, handler, guard)
    except web.HTTPRequestEntityTooLarge:
        return refusal(
            413,
            f"The form was larger than {MAX_BODY // 1024} KB, so nothing was changed. Go back: "
            "your text is still in the form.",
            title="Too long",
        )
    except Exception:
        log.exception("the page failed at %s %s", request.method, request.path)
        return refusal(
            500,
            "This page failed; the log of `nanobot-summary web` says why. Reload to see what is there now.",
            title="Something went wrong",
        )


def _token_to_cookie(request: web.Request, guard: Guard) -> web.Response:
    """The token leaves the address bar (and history) for a cookie that does not hold it.

    The redirect stays on this page (`//evil.example/?token=` goes to `/evil.example/`, a page of this site)."""
    query = {k: v for k, v in request.query.items() if k != "token"}
    response = see_other(str(URL.build(path="/" + request.path.lstrip("/\\"), query=query)))
    response.set_cookie(
        session_cookie(request),
        guard.signins.issue(guard.address_of(request)),
        httponly=True,
        samesite="Strict",
        path="/",
    )
    return response


async def sign_out(request: web.Request) -> web.Response:
    """Ends this browser's sign-in (`/sign-out`) or every browser's (`/sign-out-all`); the cookie is dropped."""
    guard = request.app[GUARD]
    if request.path == "/sign-out-all":
        guard.signins.end_all()
        text = (
            "Every browser is signed out of this page: each needs the address with the token again "
            "(`nanobot-summary web --url`)."
        )
    else:
        guard.signins.end(request.cookies.get(session_cookie(request), ""))
        text = "This browser is signed out: open the address with the token again (`nanobot-summary web --url`)."
    response = refusal(200, text, title="Signed out")
    response.del_cookie(session_cookie(request), path="/")
    return response


async def _guarded(request: web.Request, handler: Handler, guard: Guard) -> web.StreamResponse:
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
    return response


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's answer; an HTTP exception (a redirect, a 404) is an answer too, its redirect kept on this page."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        raise
    except web.HTTPException as exc:
        location = {"Location": own_path(exc.headers["Location"])} if "Location" in exc.headers else {}
        return web.Response(status=exc.status, text=exc.text, content_type="text/plain", headers=location)


GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
