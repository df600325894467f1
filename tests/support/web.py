"""The web page (`nanobot-summary web`) over real data: sessions summarized by real jobs (a burst arq worker, the
fake LLM answering as a summary model with notes and facts), MEMORY.md with the user's own lines around the
worker's part, and the page served on loopback by aiohttp's test server."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import markupsafe
from aiohttp.test_utils import TestClient, TestServer
from arq.connections import ArqRedis

from harness.fakellm import FakeLLM, FakeRequest, Reply
from harness.models import echo_memory
from harness.sandbox import NanobotHome
from harness.transcripts import conversation
from tests.support.workers import summarize_now
from worker.settings import Settings
from worker.summarize.deps import Deps
from worker.web.app import make_app
from worker.web.guard import Guard
from worker.web.instance import Instance

KEY = "telegram:42"
QUIET = "cli:direct"  # a session too short for a summary: its job does nothing, and says why
SCRIPT = "<script>alert('x')</script>"
API_KEY = "sk-proj-" + "Qw7" * 14
FACTS = [
    "The user's cat is called Miso " + SCRIPT,
    "The user prefers dark mode in every editor",
    "The user deploys with ./deploy.sh --env prod",
]
# The user's own part of MEMORY.md: CRLF line ends, a byte that is not UTF-8, and no final newline.
OWN_TOP = b"# My own notes\r\n- I like green tea\r\n- \xff odd byte kept as it is\r\n\r\n"
OWN_BOTTOM = b"\n## Written after the worker's part\nKeep this line.\n(no newline at the end)"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# Every page, with the real data's sessions and searches.
PAGES = [
    "/",
    "/memory",
    "/sessions",
    f"/session?key={quote(KEY, safe='')}",
    f"/session?key={quote(QUIET, safe='')}",
    f"/recall?q=nickname&session={quote(KEY, safe='')}",
    "/recall?q=deploy+script",
    "/notes",
    "/notes?day=2026-11-20",
]


def escaped(text: str) -> str:
    """`text` as the page must show it: HTML-escaped."""
    return str(markupsafe.escape(text))


def remembering(request: FakeRequest) -> Reply:
    """echo_memory's notes and summary (the user's lines), with FACTS as the facts it remembers."""
    answer = json.loads(echo_memory(request).content)
    answer["facts"] = [
        {"text": text, "tag": "durable", "importance": 4, "source": "user", "category": category}
        for text, category in zip(FACTS, ("preference", "preference", "configuration"), strict=True)
    ]
    return Reply(json.dumps(answer, ensure_ascii=False))


def write_sessions(workspace: Path, write_session) -> None:
    """KEY: 15 turns, one holding markup and one an API key; QUIET: two turns, under the keep rule."""
    messages = conversation(15, user="question {i} about the deploy script")
    messages[2]["content"] = f"my nickname is {SCRIPT} please remember"
    messages[4]["content"] = f"the key is {API_KEY} keep it secret"
    write_session(KEY, messages)
    write_session(QUIET, conversation(2, user="hello {i}"))
    memory = workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_bytes(OWN_TOP)


async def made_by_jobs(redis: ArqRedis, home: NanobotHome, llm: FakeLLM, deps: Deps) -> Path:
    """Both sessions through real jobs (the fake LLM answering as `remembering`); MEMORY.md then holds the user's
    lines around the worker's part. Returns MEMORY.md's path."""
    llm.responder = remembering
    write_sessions(home.workspace, home.write_session)
    await summarize_now(redis, deps, KEY)
    await summarize_now(redis, deps, QUIET)
    path = home.workspace / "memory" / "MEMORY.md"
    path.write_bytes(path.read_bytes() + OWN_BOTTOM)
    return path


@dataclass
class Page:
    """The page served on loopback, and the instance it reads."""

    client: TestClient
    instance: Instance
    guard: Guard

    async def get(self, url: str, **kwargs) -> tuple[int, str]:
        async with self.client.get(url, **kwargs) as response:
            return response.status, await response.text()

    async def csrf(self) -> str:
        status, body = await self.get("/memory")
        assert status == 200, body
        found = _CSRF.search(body)
        assert found, "the memory page's forms carry a CSRF token"
        return found.group(1)

    async def post(self, url: str, data: dict[str, str], **kwargs) -> tuple[int, str]:
        async with self.client.post(url, data=data, allow_redirects=False, **kwargs) as response:
            return response.status, response.headers.get("Location", "") or await response.text()

    @property
    def first_visit(self) -> str:
        """The address `nanobot-summary web` prints: a browser opens it first, and has the token's cookie."""
        return str(self.client.make_url("/").with_query(token=self.guard.token))


@asynccontextmanager
async def served(settings: Settings, guard: Guard | None = None, login: bool = True) -> AsyncIterator[Page]:
    """The page on loopback; its client has opened the first-visit URL (the token's cookie) unless `login` is
    False."""
    instance = Instance.load(settings)
    guard = guard or Guard.for_bind("127.0.0.1")
    client = TestClient(TestServer(make_app(instance, guard), host="127.0.0.1"))
    await client.start_server()
    try:
        page = Page(client, instance, guard)
        if login:
            async with client.get("/", params={"token": guard.token}, allow_redirects=False) as response:
                assert response.status == 303, await response.text()
        yield page
    finally:
        await client.close()
