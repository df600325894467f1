"""Recall by meaning (NANOBOT_SUMMARY_EMBEDDING_MODEL): the worker embeds what it indexes through litellm, the tool
asks the query's embedding within its bound and fuses the two rankings; the fake model answers over real HTTP."""

from __future__ import annotations

import inspect
import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from harness.fakellm import EMBEDDING_DIMENSIONS, Error, FakeLLM, Hang, meaning_vector
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.recall import RECALL_INDEX, quantize, similarity
from nanobot_hooks.contract.session_format import is_direct_chat
from nanobot_hooks.recall import meaning
from nanobot_hooks.recall import tool as recall_tool
from nanobot_hooks.recall.search import search
from nanobot_hooks.settings import HookSettings
from tests.support.bench import load_bench
from worker.memory.recall_index import RecallIndex
from worker.memory.recall_index.vectors import Embedder, litellm_embed

UTC = ZoneInfo("UTC")
DM = "telegram:42"
MODEL = "openai/fake-embed"
KEY = "sk-embed-" + "Z9q" * 10
ROWS = [
    ("2026-11-20T10:00:00", "user", "The nginx upstream timeout is 75 seconds"),
    ("2026-11-20T10:01:00", "assistant", "Noted: nginx upstream timeout 75s."),
    ("2026-11-21T09:00:00", "user", "I finished that sunset canvas yesterday, the orange one"),
    ("2026-11-21T09:01:00", "assistant", "Lovely, hang it in the hallway."),
    ("2026-11-22T18:00:00", "user", "We booked the train to Lyon for March"),
    ("2026-11-22T18:01:00", "assistant", "Have a good trip."),
]


def _messages(rows: list[tuple[str, str, str]]) -> list[dict]:
    return [{"role": role, "content": text, "timestamp": stamp} for stamp, role, text in rows]


@pytest.fixture
def home(tmp_path: Path) -> NanobotHome:
    home = NanobotHome.create(tmp_path, "http://127.0.0.1:9/v1")
    home.write_session(DM, _messages(ROWS), last_archived=len(ROWS))
    return home


@pytest.fixture(autouse=True)
def closed_clients() -> Iterator[None]:
    """litellm keeps each base URL's client for later calls: this test's fake server is gone after it."""
    yield
    import litellm

    cache = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "close", None)
        if callable(close) and not inspect.iscoroutinefunction(close):
            close()
    cache.flush_cache()


def embedder(llm: FakeLLM, model: str = MODEL) -> Embedder:
    return Embedder(model, litellm_embed(model, llm.url, KEY, timeout=5.0))


def vectors(home: NanobotHome) -> dict[int, bytes]:
    with closing(sqlite3.connect(home.workspace / RECALL_INDEX)) as db:
        return dict(db.execute("SELECT rowid, v FROM vectors"))


def embedding_requests(llm: FakeLLM) -> int:
    return sum(1 for request in llm.requests if request.path.endswith("/embeddings"))


def ask(home: NanobotHome, query: str, llm: FakeLLM | None = None) -> str:
    tool = (
        meaning.embedder(
            HookSettings(
                summary_embedding_model=MODEL, summary_embedding_api_base=llm.url, summary_embedding_api_key=KEY
            )
        )
        if llm
        else None
    )
    return search(home.workspace, query, DM, is_direct_chat, meaning=tool)


def first_hit(answer: str) -> str:
    return next(line for line in answer.split("\n") if line.startswith("1. "))


def test_indexing_stores_one_compact_vector_a_passage_and_asks_once(home, fake_llm):
    index = RecallIndex(home.workspace, UTC, embedder(fake_llm))
    done = index.refresh(home.sessions_dir)
    stored = vectors(home)
    assert done.embedded == len(ROWS) == len(stored) and "6 passages embedded" in str(done)
    assert all(len(v) == EMBEDDING_DIMENSIONS for v in stored.values()), "int8: one byte a dimension"
    painting = quantize(meaning_vector("painting"))
    assert max(stored, key=lambda rowid: similarity(stored[rowid], painting)) == min(stored) + 2, "the sunset canvas"
    asked = embedding_requests(fake_llm)
    assert index.refresh(home.sessions_dir).embedded == 0 and embedding_requests(fake_llm) == asked
    home.write_session(DM, _messages(ROWS[:2]), last_archived=2)  # a reset session: its passages and vectors go
    index.refresh(home.sessions_dir)
    assert len(vectors(home)) == 2


def test_a_paraphrase_is_found_by_meaning_and_not_by_words_alone(home, fake_llm):
    RecallIndex(home.workspace, UTC, embedder(fake_llm)).refresh(home.sessions_dir)
    assert "sunset canvas" not in ask(home, "painting")
    found = ask(home, "painting", fake_llm)
    assert "sunset canvas" in found and "message 2 (user)" in first_hit(found)
    request = [r for r in fake_llm.requests if r.path.endswith("/embeddings")][-1]
    assert request.body == {"model": "fake-embed", "input": ["painting"]}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    exact = ask(home, "nginx timeout", fake_llm)
    assert "message 0 (user)" in first_hit(exact) or "message 1 (assistant)" in first_hit(exact)
    assert "Lyon" not in exact, "a passage found by meaning alone stands out by it"


@pytest.mark.parametrize("trouble", [Hang(10.0), Error.server(), Error(404, "no such model")])
def test_a_hanging_or_failing_endpoint_gives_the_lexical_answer_within_the_bound(home, fake_llm, trouble, caplog):
    RecallIndex(home.workspace, UTC, embedder(fake_llm)).refresh(home.sessions_dir)
    lexical = ask(home, "nginx timeout")
    fake_llm.embeddings = trouble
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG):
        answered = ask(home, "nginx timeout", fake_llm)
    assert answered == lexical, "nothing said to the assistant beyond the usual answer"
    assert time.monotonic() - started < meaning.QUERY_SECONDS + 1.0
    assert KEY not in caplog.text


def test_without_vectors_the_tool_asks_no_embedding(home, fake_llm):
    RecallIndex(home.workspace, UTC).refresh(home.sessions_dir)  # the worker has no model set
    assert "75 seconds" in ask(home, "nginx timeout", fake_llm)
    assert embedding_requests(fake_llm) == 0


def test_a_failing_model_never_fails_the_refresh_and_is_not_asked_again_at_once(home, fake_llm, caplog):
    fake_llm.embeddings = Error.server()
    index = RecallIndex(home.workspace, UTC, embedder(fake_llm))
    with caplog.at_level(logging.WARNING):
        done = index.refresh(home.sessions_dir)
    assert done.messages == len(ROWS) and done.embedded == 0 and vectors(home) == {}
    assert "embedding with openai/fake-embed failed" in caplog.text and KEY not in caplog.text
    asked = embedding_requests(fake_llm)
    home.write_session(DM, _messages(ROWS + [("2026-11-23T08:00:00", "user", "one more")]), last_archived=7)
    assert index.refresh(home.sessions_dir).messages == 1 and embedding_requests(fake_llm) == asked, "paused"
    fake_llm.embeddings = None
    index.embedder.pause_until = 0.0  # the pause is over
    assert index.refresh(home.sessions_dir).embedded == len(ROWS) + 1


def test_a_refused_passage_is_marked_and_never_asked_again(home, fake_llm):
    fake_llm.embeddings = Error(400, "input rejected", type="invalid_request_error")
    index = RecallIndex(home.workspace, UTC, embedder(fake_llm))
    index.refresh(home.sessions_dir)
    assert embedding_requests(fake_llm) == 1 + len(ROWS), "the batch, then each passage alone"
    assert sorted(vectors(home).values()) == [b""] * len(ROWS)
    fake_llm.embeddings = None
    index.refresh(home.sessions_dir)
    assert embedding_requests(fake_llm) == 1 + len(ROWS)
    assert "sunset canvas" not in ask(home, "painting", fake_llm), "a refused passage is found by its words only"


def test_another_model_replaces_the_vectors(home, fake_llm):
    RecallIndex(home.workspace, UTC, embedder(fake_llm)).refresh(home.sessions_dir)
    with closing(sqlite3.connect(home.workspace / RECALL_INDEX)) as db, db:
        db.execute("UPDATE vectors SET v = x'00'")
    RecallIndex(home.workspace, UTC, embedder(fake_llm, "openai/other-embed")).refresh(home.sessions_dir)
    assert all(len(v) == EMBEDDING_DIMENSIONS for v in vectors(home).values()) and len(vectors(home)) == len(ROWS)


def test_an_index_made_before_vectors_gets_their_table_without_a_rebuild(home, fake_llm):
    RecallIndex(home.workspace, UTC).refresh(home.sessions_dir)
    with closing(sqlite3.connect(home.workspace / RECALL_INDEX)) as db, db:
        db.execute("DROP TABLE vectors")
    assert "75 seconds" in ask(home, "nginx timeout", fake_llm), "the tool reads an index without vectors"
    done = RecallIndex(home.workspace, UTC, embedder(fake_llm)).refresh(home.sessions_dir)
    assert not done.rebuilt and done.embedded == len(ROWS)


def test_the_tool_uses_meaning_only_where_it_can_reach_the_model():
    assert meaning.embedder(HookSettings()) is None
    assert meaning.embedder(HookSettings(summary_embedding_model="ollama/nomic-embed-text")) is None
    assert meaning.embedder(HookSettings(summary_embedding_model="text-embedding-3-small")) is not None
    assert quantize([0.0, 0.0]) == b"" and similarity(b"", quantize([1.0])) == 0.0
    assert similarity(quantize([3.0, 4.0]), quantize([6.0, 8.0])) == pytest.approx(1.0, abs=0.01)


async def test_the_tool_finds_by_meaning_with_the_setting(home, fake_llm, monkeypatch):
    RecallIndex(home.workspace, UTC, embedder(fake_llm)).refresh(home.sessions_dir)
    monkeypatch.setattr(recall_tool, "_asking_session", lambda: DM)
    words = recall_tool.RecallTool(home.workspace, HookSettings())
    both = recall_tool.RecallTool(
        home.workspace, HookSettings(summary_embedding_model=MODEL, summary_embedding_api_base=fake_llm.url)
    )
    assert "sunset canvas" not in await words.execute(query="painting")
    assert "sunset canvas" in await both.execute(query="painting")


def test_the_retrieval_benchmark_measures_with_an_embedding_model(fake_llm, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    bench = load_bench("bench_retrieval")
    monkeypatch.setattr(bench, "QUERY_EMBEDDER", None)
    assert (
        bench.main(
            ["--smoke", "--today", "2026-12-01", "--embedding-model", MODEL, "--embedding-api-base", fake_llm.url]
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert "recall@5" in stdout and '"figures"' in stdout
    asked = [r.body["input"] for r in fake_llm.requests if r.path.endswith("/embeddings")]
    assert any(len(texts) > 1 for texts in asked), "the turns embedded in batches"
    assert sum(len(texts) == 1 for texts in asked) > 20, "and each query"
