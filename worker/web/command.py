"""`nanobot-summary web`: the page served until Ctrl-C or SIGTERM; its first-visit address (carrying the token of
the user's token file) printed on start to a terminal, or by `--url`."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from pathlib import Path

from aiohttp import web

from worker.errors import NanobotConfigError
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
    """What the page prints on start (pure): the first-visit URL with the token on a terminal; elsewhere (a
    service's journal, which other accounts may read) the URL without it, and where the token is."""
    mode = " (read-only)" if read_only else ""
    if terminal:
        return [f"nanobot-summary web{mode}: open {address(host, port, token)}",
                f"The token (in {token_file}, readable by you only) lets whoever has it read and change the memory."]
    return [f"nanobot-summary web{mode}: listening on {address(host, port, None)}",
            f"It needs the token in {token_file}: run `nanobot-summary web --url` as this user for the address "
            "to open."]


async def listening(app: web.Application, host: str, port: int) -> web.AppRunner:
    """The page's server, listening on `host`:`port` (0: any free port, `runner.addresses` says which); the
    caller cleans the runner up."""
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
        for line in start_lines(host, bound, guard.token, token_file, sys.stdout.isatty(), guard.read_only):
            print(line, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(args: argparse.Namespace) -> int:
    token_file = Path(args.token_file) if args.token_file else default_path()
    try:
        token = load_or_create(token_file)
        if args.url:
            print(address(args.host, args.port, token))
            return 0
        if args.sign_out_all:
            sign_out_all(token_file)
            print("Every browser is signed out of every page using this token file: each needs the address with "
                  "the token again (`nanobot-summary web --url`).")
            return 0
        instance = Instance.load()
        guard = Guard.for_bind(args.host, read_only=args.read_only, token=token,
                               signins=SignIns(signed_out_file=signed_out_path(token_file)))
    except (SettingsError, NanobotConfigError, Refused, TokenFileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(make_app(instance, guard), args.host, args.port, guard, token_file))
    except OSError as exc:  # the port is taken, the address is not this machine's
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
