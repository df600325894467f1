"""`nanobot-summary web`: the page served until Ctrl-C or SIGTERM; its address (with the token, when one is
needed) printed once on start."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys

from aiohttp import web

from worker.errors import NanobotConfigError
from worker.settings import SettingsError
from worker.web.app import make_app
from worker.web.guard import Guard, Refused
from worker.web.instance import Instance


def address(host: str, port: int, token: str | None) -> str:
    """The URL to open: the machine's name for an all-interfaces bind, the token in the query once."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


async def serve(app: web.Application, host: str, port: int, guard: Guard) -> None:
    # No access log: the first request's URL carries the token.
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        mode = " (read-only)" if guard.read_only else ""
        print(f"nanobot-summary web{mode}: open {address(host, bound, guard.token)}", flush=True)
        if guard.token:
            print("The token is printed only here: anyone with it can read and change the memory.", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(args: argparse.Namespace) -> int:
    try:
        instance = Instance.load()
        guard = Guard.for_bind(args.host, read_only=args.read_only)
    except (SettingsError, NanobotConfigError, Refused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(make_app(instance, guard), args.host, args.port, guard))
    except OSError as exc:  # the port is taken, the address is not this machine's
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
