"""`/new` loses nothing: what was said before it reaches the day's notes, MEMORY.md and the recall index, through a
real `nanobot agent -m /new` and a real gateway, a real arq worker, real Redis and the fake LLM."""

from __future__ import annotations

from datetime import date

from harness.environment import process_env
from harness.fakellm import FakeRequest, Reply
from harness.models import SMALL_PROMPT, SUMMARY_MODEL, LLMScript, Summarizer
from harness.nanobot_cli import turn
from harness.sandbox import NanobotHome, session_lines
from nanobot_hooks.contract.marker import SessionMarker
from nanobot_hooks.contract.session_format import RETIRED_FOLDER
from nanobot_hooks.recall.search import search
from tests.support.crossing import CHAT
from tests.support.queue_probes import queued_jobs, queued_reason
from tests.support.waiting import wait_until
from tests.support.workers import run_burst
from worker.state.outcomes import load_outcome

FACT = "The user's staging database listens on port 54329"
# Each turn says more than a notes line keeps (the fake model notes a user line's first 60 characters): the
# word at its end is found by recall in the message itself, never in the notes.
SAID = [
    f"question {n} before the reset: the staging database moved to port 54329, remember it please, keyword {word}"
    for n, word in enumerate(("zephyrine", "quillaja", "marjoram"))
]


class NotingScript(LLMScript):
    """nanobot's turns as LLMScript answers them; the worker's calls by an obedient model that notes each user
    line and offers FACT as stated by the user."""

    def __init__(self) -> None:
        super().__init__()
        self.summarizer = Summarizer(
            facts=[{"text": FACT, "tag": "durable", "importance": 4, "source": "user", "category": "configuration"}]
        )

    def __call__(self, request: FakeRequest) -> Reply:
        if (request.body or {}).get("model") == SUMMARY_MODEL:
            return self.summarizer(request)
        return super().__call__(request)


def assert_nothing_lost(home: NanobotHome, key: str) -> None:
    memory = home.workspace / "memory"
    notes = (memory / f"{date.today().isoformat()}.md").read_text(encoding="utf-8")
    assert all(said[:60] in notes for said in SAID), notes
    assert FACT in (memory / "MEMORY.md").read_text(encoding="utf-8")
    for word in ("zephyrine", "quillaja", "marjoram"):
        found = search(home.workspace, word, key, lambda _: True)
        assert f"keyword {word}" in found and "(before /new)" in found, found
    head, messages = session_lines(home, key)
    assert messages == [], "nanobot's /new emptied the session as before"
    assert SessionMarker.generation(head["metadata"]) == 1, "the new conversation is the session's next generation"


async def test_what_was_said_before_new_in_nanobot_agent_reaches_notes_memory_and_recall(
    nanobot_exe, agent_home, fake_llm, redis, redis_url, worker_deps
):
    key = "telegram:330"
    fake_llm.responder = NotingScript()
    env = process_env(agent_home, redis_url, NANOBOT_SUMMARY_INTERVAL="0")
    for said in SAID:
        await turn(nanobot_exe, agent_home, env, key, said)
    assert await queued_jobs(redis) == 0, "no job before /new: everything said is un-noted"

    await turn(nanobot_exe, agent_home, env, key, "/new")
    assert await queued_reason(redis, key) == "new"
    assert len(list((agent_home.sessions_dir / RETIRED_FOLDER).iterdir())) == 1
    await run_burst(worker_deps())
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.status == "noted", outcome
    assert_nothing_lost(agent_home, key)


async def test_what_was_said_before_new_in_a_gateway_reaches_notes_memory_and_recall(
    gateway, nanobot_home, fake_llm, redis, worker_deps
):
    key = f"websocket:{CHAT}"
    fake_llm.responder = NotingScript()
    fake_llm.responder.prompt_tokens = SMALL_PROMPT
    gw = await gateway(NANOBOT_SUMMARY_INTERVAL="0", NANOBOT_MEMORY_SESSIONS="websocket:*")
    for said in SAID:
        await gw.say(CHAT, said)
    assert await queued_jobs(redis) == 0
    await gw.say(CHAT, "/new")
    await wait_until(lambda: queued_jobs(redis), what="the job queued at /new")
    await run_burst(worker_deps(memory_sessions="websocket:*"))
    outcome = await load_outcome(redis, key)
    assert outcome is not None and outcome.status == "noted", outcome
    assert_nothing_lost(nanobot_home, key)
