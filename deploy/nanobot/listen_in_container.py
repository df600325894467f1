"""nanobot's config made to listen on every interface of its container, so the ports deploy/docker-compose.nanobot.yml
publishes reach it: `nanobot onboard` writes "host": "127.0.0.1" under `gateway` and `channels.websocket`, and
Docker forwards a published port to the container's own interface, never to its loopback.

Run once after `onboard`, in nanobot's own container (its folder, its user; Python's standard library only, the
script read from stdin: nothing of the checkout is in an image):

    docker compose -f deploy/docker-compose.nanobot.yml run --rm --no-deps -T --entrypoint python nanobot-cli \
        - < deploy/nanobot/listen_in_container.py

nanobot refuses a web chat on 0.0.0.0 without a way to authenticate (`token`, `tokenIssueSecret` or
`trustedProxyAuth` under `channels.websocket`; onboard's WebUI password is `tokenIssueSecret`): without one this
changes nothing and says so. Only the two `host` values change; the file is replaced whole (a temporary file
beside it, its mode kept). The published ports stay on the host's loopback (the compose file)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ANY = "0.0.0.0"


def authenticated(web: dict[str, Any]) -> bool:
    """Whether nanobot lets its web chat listen on 0.0.0.0 (its config's keys in camelCase or snake_case)."""
    secrets = (web.get(key) for key in ("token", "tokenIssueSecret", "token_issue_secret"))
    proxy = web.get("trustedProxyAuth", web.get("trusted_proxy_auth"))
    return any(isinstance(value, str) and value.strip() for value in secrets) or isinstance(proxy, dict)


def listening(config: dict[str, Any]) -> dict[str, Any]:
    """The config with the gateway and the web chat on every interface; ValueError when the web chat has no
    authentication (nanobot would refuse to start it)."""
    channels = config.get("channels") if isinstance(config.get("channels"), dict) else {}
    web = channels.get("websocket")
    if isinstance(web, dict) and web.get("enabled", True) is not False:
        if not authenticated(web):
            raise ValueError("the web chat (channels.websocket) has no token, tokenIssueSecret or trustedProxyAuth: "
                             "nanobot refuses to listen on 0.0.0.0 without one. Run `onboard` again and set the "
                             "WebUI password, or set channels.websocket.token, then run this again")
        web = {**web, "host": ANY}
        channels = {**channels, "websocket": web}
    gateway = config.get("gateway") if isinstance(config.get("gateway"), dict) else {}
    changed = {**config, "gateway": {**gateway, "host": ANY}}
    if channels:
        changed["channels"] = channels
    return changed


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
        changed = listening(config)
    except (OSError, ValueError) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    if changed == config:
        print(f"{path}: nanobot already listens on {ANY}")
        return 0
    replace(path, changed)
    print(f"{path}: gateway and web chat now listen on {ANY} inside the container; restart the gateway: "
          "docker compose -f deploy/docker-compose.nanobot.yml restart nanobot-gateway")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
