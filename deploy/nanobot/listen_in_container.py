"""nanobot's config made to listen on every interface of its container, so the ports deploy/docker-compose.nanobot.yml
publishes reach it: `nanobot onboard` writes "host": "127.0.0.1" under `gateway` and `channels.websocket`, and
Docker forwards a published port to the container's own interface, never to its loopback.

Run once after `onboard`, in nanobot's own container (its folder, its user; Python's standard library only, the
script read from stdin: nothing of the checkout is in an image):

    docker compose -f deploy/docker-compose.nanobot.yml run --rm --no-deps -T --entrypoint python nanobot-cli \
        - < deploy/nanobot/listen_in_container.py

nanobot refuses a web chat on 0.0.0.0 without a way to authenticate (`token`, `tokenIssueSecret` or
`trustedProxyAuth` under `channels.websocket`; `onboard --wizard` asks for the WebUI password, `tokenIssueSecret`,
a plain `onboard` sets none): a web chat without one gets a random WebUI password, written to the config and never
printed (the web chat asks for it: read it there, or change it there and restart the gateway). Only the two `host`
values and that password change; the file is replaced whole (a temporary file beside it, its mode kept). The
published ports stay on the host's loopback (the compose file), which publishes nanobot's default ports: the
script names the variables to set when the config's ports are others."""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

ANY = "0.0.0.0"
PASSWORD = "tokenIssueSecret"  # what `onboard --wizard` sets from the WebUI password it asks for
# nanobot's default ports, which the compose file publishes, and the variables naming others (the container's side).
PORTS = {"gateway": (18790, "NANOBOT_GATEWAY_PORT"), "websocket": (8765, "NANOBOT_WEB_CHAT_PORT")}


def authenticated(web: dict[str, Any]) -> bool:
    """Whether nanobot lets its web chat listen on 0.0.0.0 (its config's keys in camelCase or snake_case)."""
    secrets = (web.get(key) for key in ("token", "tokenIssueSecret", "token_issue_secret"))
    proxy = web.get("trustedProxyAuth", web.get("trusted_proxy_auth"))
    return any(isinstance(value, str) and value.strip() for value in secrets) or isinstance(proxy, dict)


def listening(config: dict[str, Any], new_password: str) -> dict[str, Any]:
    """The config with the gateway and the web chat on every interface; a web chat without authentication (which
    nanobot would refuse to start there) gets `new_password` as its WebUI password."""
    channels = config.get("channels") if isinstance(config.get("channels"), dict) else {}
    web = channels.get("websocket")
    if isinstance(web, dict) and web.get("enabled", True) is not False:
        web = {**web, "host": ANY} if authenticated(web) else {**web, "host": ANY, PASSWORD: new_password}
        channels = {**channels, "websocket": web}
    gateway = config.get("gateway") if isinstance(config.get("gateway"), dict) else {}
    changed = {**config, "gateway": {**gateway, "host": ANY}}
    if channels:
        changed["channels"] = channels
    return changed


def port_lines(config: dict[str, Any]) -> list[str]:
    """What to set when the gateway's or the web chat's port is not the one the compose file publishes by default."""
    channels = config.get("channels") if isinstance(config.get("channels"), dict) else {}
    sections = {"gateway": config.get("gateway"), "websocket": channels.get("websocket")}
    lines = []
    for name, (default, variable) in PORTS.items():
        port = sections[name].get("port", default) if isinstance(sections[name], dict) else default
        if port != default:
            lines.append(f"{name} listens on port {port}: set {variable}={port} for docker compose")
    return lines


def replace(path: Path, config: dict[str, Any]) -> None:
    """The file replaced whole: written beside it, synced, its mode kept, renamed over it."""
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(config, out, indent=2, ensure_ascii=False)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else os.environ.get("NANOBOT_CONFIG", "~/.nanobot/config.json")).expanduser()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        changed = listening(config, secrets.token_urlsafe(32))
    except (OSError, ValueError) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    for line in port_lines(changed):
        print(line)
    if changed == config:
        print(f"{path}: nanobot already listens on {ANY}")
        return 0
    replace(path, changed)
    web = changed.get("channels", {}).get("websocket")
    if isinstance(web, dict) and web.get(PASSWORD) != config["channels"]["websocket"].get(PASSWORD):
        print(
            f"{path}: the web chat had no password: a random WebUI password is now channels.websocket.{PASSWORD} "
            "there (the web chat asks for it)"
        )
    print(
        f"{path}: gateway and web chat now listen on {ANY} inside the container; restart the gateway: "
        "docker compose -f deploy/docker-compose.nanobot.yml restart nanobot-gateway"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
