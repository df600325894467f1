"""Web-chat sessions by a name a person recognizes (worker.web.names): the title nanobot's web UI lists a session
under, or the first words of its first user message, on the overview, the sessions list and the session's page,
the key still shown small beside it; a name from a conversation is text like any other."""

from __future__ import annotations

from urllib.parse import quote

from harness.defaults import TEST_KEYS
from tests.support.web import SCRIPT, escaped, served
from worker.state.outcomes import JobOutcome
from worker.web.names import name_from, shortened

TITLED = "websocket:3356daf5-0c1e-4f7b-9a54-1f2e3d4c5b6a"
UNTITLED = "websocket:8a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
FIRST = "Can you help me plan the garden beds for spring, with tomatoes, beans and a row of marigolds between them?"


def test_a_name_is_the_title_else_a_web_chats_first_words_of_the_user() -> None:
    assert name_from(TITLED, {"title": "<think>naming it</think>Trip to Lisbon"}, []) == "Trip to Lisbon"
    assert (
        name_from(TITLED, {"title": "<think>kept</think> as typed", "title_user_edited": True}, [])
        == "<think>kept</think> as typed"
    )
    hidden = {"role": "user", "content": "Continue the active task", "_hidden_history": True}
    blocks = {"role": "user", "content": [{"type": "text", "text": FIRST}]}
    assert (
        name_from(UNTITLED, {}, [hidden, {"role": "assistant", "content": "hi"}, blocks])
        == "Can you help me plan the garden beds for spring, with…"
    )
    assert name_from("telegram:42", {}, [blocks]) is None, "a chat's own key says who it is"
    assert name_from(UNTITLED, {"title": "  "}, []) is None
    assert shortened("a" * 80) == "a" * 60 + "…" and shortened("two  words\n") == "two words"


async def test_web_chats_are_listed_by_their_names_with_the_key_small_beside(nanobot_home, settings_for, redis):
    nanobot_home.write_session(TITLED, [{"role": "user", "content": "hello"}], metadata={"title": f"Trip {SCRIPT}"})
    nanobot_home.write_session(UNTITLED, [{"role": "user", "content": FIRST}, {"role": "assistant", "content": "Yes"}])
    nanobot_home.write_session("telegram:42", [{"role": "user", "content": "hello"}])
    for key in (TITLED, UNTITLED):
        await redis.set(
            TEST_KEYS.outcome(key), JobOutcome(session_key=key, status="noop", detail="too little").model_dump_json()
        )
        await redis.sadd(TEST_KEYS.index("outcomes"), key)  # as the worker indexes what it keeps
    garden = "Can you help me plan the garden beds for spring, with…"
    async with served(settings_for()) as page:
        for url in ("/", "/sessions"):
            status, body = await page.get(url)
            assert status == 200, url
            assert f'">{garden}</a> <small class="session-key">{UNTITLED}</small>' in body, url
            assert f'">Trip {escaped(SCRIPT)}</a> <small class="session-key">{TITLED}</small>' in body, url
            assert "<script" not in body.lower()
        _, listed = await page.get("/sessions")
        assert '">telegram:42</a>' in listed, "a session without a name keeps its key"
        _, session = await page.get(f"/session?key={quote(UNTITLED, safe='')}")
        assert f"<h1>{garden}</h1>" in session and f"<code>{UNTITLED}</code>" in session
        assert f"<title>{garden} · nanobot summary</title>" in session


async def test_the_overviews_chart_labels_a_web_chat_by_its_name(nanobot_home, settings_for, redis):
    nanobot_home.write_session(UNTITLED, [{"role": "user", "content": FIRST}])
    done = JobOutcome(
        session_key=UNTITLED, status="summarized", detail="messages 0..9", tokens_before=704, tokens_after=324
    )
    await redis.set(TEST_KEYS.outcome(UNTITLED), done.model_dump_json())
    await redis.sadd(TEST_KEYS.index("outcomes"), UNTITLED)
    async with served(settings_for()) as page:
        _, body = await page.get("/")
    assert '<text x="0" y="15">Can you help me plan the…</text>' in body


async def test_the_recall_page_offers_and_names_web_chats_by_their_names(nanobot_home, settings_for):
    """The recall page's list of sessions to ask as showed keys (`websocket:3356daf5-...`) where every other page
    shows names."""
    nanobot_home.write_session(TITLED, [{"role": "user", "content": "hello"}], metadata={"title": f"Trip {SCRIPT}"})
    nanobot_home.write_session(UNTITLED, [{"role": "user", "content": FIRST}])
    nanobot_home.write_session("telegram:42", [{"role": "user", "content": "hello"}])
    garden = "Can you help me plan the garden beds for spring, with…"
    async with served(settings_for()) as page:
        _, body = await page.get("/recall")
        assert f'<option value="{UNTITLED}">{garden}</option>' in body
        assert f'<option value="{TITLED}">Trip {escaped(SCRIPT)}</option>' in body
        assert '<option value="telegram:42">telegram:42</option>' in body, "a session without a name: its key"
        _, body = await page.get(f"/recall?q=garden&session={quote(UNTITLED, safe='')}")
        assert (
            f'Asking as <a href="/session?key={quote(UNTITLED, safe="")}">{garden}</a> '
            f'<small class="session-key">{UNTITLED}</small>' in body
        )
        assert "<script" not in body.lower()
