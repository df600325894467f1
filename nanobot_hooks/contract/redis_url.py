"""Redis URLs as both sides read them: a Sentinel URL parsed, and any URL shown without its password."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote, urlsplit

__all__ = ["SENTINEL_SCHEME", "redacted_url", "sentinel_target", "SentinelTarget"]


def redacted_url(url: str) -> str:
    """`url` fit for output: a password (in the user part or as `?password=`) becomes ***.

    The host part is kept as written (IPv6 brackets, port). Never raises."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        userinfo, at, host = netloc.rpartition("@")
        if at and ":" in userinfo:
            netloc = f"{userinfo.partition(':')[0]}:***@{host}"
        query = (
            "&".join(
                f"{name}=***" if sep and name.strip().lower() == "password" else f"{name}{sep}{value}"
                for name, sep, value in (item.partition("=") for item in parts.query.split("&"))
            )
            if parts.query
            else parts.query
        )
        return (
            f"{parts.scheme}:"
            + ("//" if url[len(parts.scheme) + 1 :].startswith("//") else "")
            + netloc
            + parts.path
            + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else "")
        )
    except Exception:  # noqa: BLE001 - a malformed URL must not break a log line, nor leak through it
        return "<a URL that cannot be parsed>"


SENTINEL_SCHEME = "redis+sentinel://"


class SentinelTarget(NamedTuple):
    """A `redis+sentinel://[user:password@]host:port[,host:port...]/service/db` URL, read.

    The Sentinels to ask, the name they monitor the primary by, and what to use on the primary (its database, user and
    password; the Sentinels themselves are asked without credentials)."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> SentinelTarget:
        """Raises ValueError naming what is wrong (never quoting the password)."""
        userinfo, at, hosts = url.removeprefix(SENTINEL_SCHEME).partition("/")[0].rpartition("@")
        if not at:
            hosts = userinfo or hosts
            userinfo = ""
        username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
        sentinels = []
        for item in hosts.split(","):
            host, sep, port = item.strip().rpartition(":")
            if not sep:
                host, port = port, "26379"
            host = host.strip("[]")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port for each Sentinel, not {item.strip()!r}")
            sentinels.append((host, int(port)))
        path = url.removeprefix(SENTINEL_SCHEME).partition("/")[2].split("?")[0].strip("/").split("/")
        if not path[0]:
            raise ValueError(
                "expected the Sentinel's service name after the hosts: redis+sentinel://host:port/mymaster/0"
            )
        if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise ValueError("expected /service_name or /service_name/db after the hosts")
        return cls(
            sentinels,
            unquote(path[0]),
            int(path[1]) if len(path) == 2 else 0,
            unquote(username) or None,
            unquote(password) or None,
        )


def sentinel_target(url: str) -> SentinelTarget | None:
    """The Sentinel setup a URL names, or None for a URL of one Redis server."""
    return SentinelTarget.parse(url) if url.startswith(SENTINEL_SCHEME) else None
