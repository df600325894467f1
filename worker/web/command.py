"""`nanobot-summary web`.

The page served until Ctrl-C or SIGTERM; its first-visit address (carrying the token of the user's token file) printed
on start to a terminal, or by `--url`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

from aiohttp import web

from worker.errors import NanobotConfigError
from worker.files import alive, state_folder
from worker.settings import SettingsError
from worker.web.app import make_app
from worker.web.guard import Guard, Refused, headers_on_parser_errors
from worker.web.instance import Instance
from worker.web.signin import SignIns, sign_out_all, signed_out_path
from worker.web.tokenfile import TokenFileError, default_path, load_or_create


def address(host: str, port: int, token: str | None) -> str:
    """The URL to open: the machine's name for an all-interfaces bind, the token in the query once."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def start_lines(host: str, port: int, token: str, token_file: Path, terminal: bool, read_only: bool) -> list[str]:
    """What the page prints on start (pure).

    The first-visit URL with the token on a terminal; elsewhere (a service's journal, which other accounts may read) the
    URL without it, and where the token is."""
    mode = " (read-only)" if read_only else ""
    if terminal:
        return [
            f"nanobot-summary web{mode}: open {address(host, port, token)}",
            f"The token (in {token_file}, readable by you only) lets whoever has it read and change the memory.",
        ]
    return [
        f"nanobot-summary web{mode}: listening on {address(host, port, None)}",
        f"It needs the token in {token_file}: run `nanobot-summary web --url` as this user for the address to open.",
    ]


DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8766


def running_path() -> Path:
    """Where a running page records its address, for `--url` (the state folder)."""
    return state_folder() / "web-page.json"


def note_running(host: str, port: int) -> None:
    """Record this page's bound address (`--url` names the running page, not the default port)."""
    path = running_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), "host": host, "port": port}), encoding="utf-8")
    except OSError:
        pass  # a read-only home: `--url` then names the address given to it


def forget_running() -> None:
    if running().get("pid") == os.getpid():
        running_path().unlink(missing_ok=True)


def running() -> dict[str, object]:
    """The running page's record ({} when none runs: no record, or its process is gone)."""
    try:
        found = json.loads(running_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict) or not isinstance(found.get("pid"), int) or not alive(found["pid"]):
        return {}
    return found


def url_lines(host: str | None, port: int | None, token: str) -> tuple[str, str | None]:
    """`--url`'s address (the running page's unless a host or port is given) and a note for stderr, or None."""
    page = running()
    if host is None and port is None and isinstance(page.get("host"), str) and isinstance(page.get("port"), int):
        return address(str(page["host"]), int(str(page["port"])), token), None
    shown = address(host or DEFAULT_HOST, DEFAULT_PORT if port is None else port, token)
    if page:
        return shown, None
    return shown, "no page of yours is running now: `nanobot-summary web` starts it at this address"


async def listening(app: web.Application, host: str, port: int) -> web.AppRunner:
    """The page's server, listening on `host`.

    `port` (0: any free port, `runner.addresses` says which); the caller cleans the runner up."""
    # No access log: the first request's URL carries the token.
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    assert runner.server is not None  # set up
    headers_on_parser_errors(runner.server, app)
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def serve(app: web.Application, host: str, port: int, guard: Guard, token_file: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = await listening(app, host, port)
    try:
        bound = runner.addresses[0][1]
        note_running(host, bound)
        for line in start_lines(host, bound, guard.token, token_file, sys.stdout.isatty(), guard.read_only):
            print(line, flush=True)
        await stop.wait()
    finally:
        forget_running()
        await runner.cleanup()


def main(args: argparse.Namespace) -> int:
    token_file = Path(args.token_file) if args.token_file else default_path()
    host, port = args.host or DEFAULT_HOST, DEFAULT_PORT if args.port is None else args.port
    try:
        token = load_or_create(token_file)
        if args.url:
            shown, note = url_lines(args.host, args.port, token)
            print(shown)
            if note:
                print(f"note: {note}", file=sys.stderr)
            return 0
        if args.sign_out_all:
            sign_out_all(token_file)
            print(
                "Every browser is signed out of every page using this token file: each needs the address with "
                "the token again (`nanobot-summary web --url`)."
            )
            return 0
        instance = Instance.load()
        guard = Guard.for_bind(
            host, read_only=args.read_only, token=token, signins=SignIns(signed_out_file=signed_out_path(token_file))
        )
    except (SettingsError, NanobotConfigError, Refused, TokenFileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(make_app(instance, guard), host, port, guard, token_file))
    except OSError as exc:  # the port is taken, the address is not this machine's
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
