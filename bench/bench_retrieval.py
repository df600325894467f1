"""Retrieval benchmark of the recall tool: recall@1 and @5 on generated conversations, beside plain BM25.

Conversations in the style of LoCoMo (two friends chatting over months, in English and in Chinese; see
bench/retrieval_corpus.py) are written as nanobot session files and archived by the worker: in the full
run by real summary jobs (one per conversation, a burst arq worker, the fake model on loopback), in the smoke
run by the worker's index refresh called directly (what its jobs and its start-up run). Every question is
asked through the tool's search as the session itself, in two forms: its keywords (`Anna audition`) and the
question as asked ("When did Anna go to her audition?"). A question counts as found at k when one of its
evidence turns is among the first k passages. The baseline is rank_bm25's BM25Okapi over the same archived
turns with the same queries, in the same run.

Prints the figures per language and query form, the ratios tool / BM25 (the goals of issue 24: top 5 with
keywords >= 1.2x BM25's, with questions >= 1.0x, recall@1 >= BM25's), the questions answered with nothing
although a turn holds one of their content words, the search's latency, and a last line of JSON.
`--smoke` is a small, quick run (the test suite's). `--embedding-model` (with `--embedding-api-base`) embeds the
archived turns and the queries, as NANOBOT_SUMMARY_EMBEDDING_MODEL does (with --archive index).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the worker runs from this checkout

from rank_bm25 import BM25Okapi

from bench import retrieval_corpus as corpus
from harness.redis_server import free_port
from harness.sandbox import NanobotHome
from nanobot_hooks.contract.recall import RECALL_INDEX
from nanobot_hooks.contract.session_format import is_direct_chat
from nanobot_hooks.recall import meaning
from nanobot_hooks.recall.search import search
from nanobot_hooks.settings import HookSettings
from worker.memory.recall_index import RecallIndex
from worker.memory.recall_index.vectors import Embedder, litellm_embed

FORMS = ("keywords", "question")
LANGUAGES = ("en", "zh")
CATEGORIES = ("exact", "paraphrase", "when", "dated")
TOP = 5  # the tool returns five passages
# A passage header of the tool's answer: "1. 2026-11-20 10:00 · this conversation, message 12 (user)".
PASSAGE = re.compile(r"^\d+\. .*?\bmessage (\d+)\b")
# A neighbour shown under its passage: "   after it, message 13 (assistant): ..." (counted at its passage's rank).
CONTEXT = re.compile(r"^   (?:before|after) it, message (\d+) ")
NUMBERED = re.compile(r"^\d+\. ", re.MULTILINE)
CJK_RUN = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")
# The search reads "last week" in a query against its `today` argument when it has one (since issue 24's
# ranking; before it, dates in a query were words): passing the day the benchmark asks on makes a run
# with --today repeatable on any day.
TAKES_TODAY = "today" in inspect.signature(search).parameters
BM25_TOKENS = "lowercase \\w+ words; Chinese runs as overlapping character bigrams"


def bm25_tokens(text: str) -> list[str]:
    """Plain tokens for the baseline: lowercase `\\w+` words, and Chinese as overlapping character bigrams.

    Bigrams rather than a segmenter (jieba): they are what Lucene's CJK analyzer and most BM25 set-ups for
    Chinese use, they need no dictionary (so the invented names and titles are not cut differently from
    ordinary words), and they cost no start-up; whitespace splitting would make a Chinese sentence one token."""
    tokens = []
    for word in re.findall(r"\w+", text.lower()):
        for piece in CJK_RUN.split(word):
            if CJK_RUN.fullmatch(piece):
                tokens += [piece[i : i + 2] for i in range(len(piece) - 1)] or [piece]
            elif piece:
                tokens.append(piece)
    return tokens


class Baseline:
    """BM25Okapi (rank_bm25's defaults: k1 1.5, b 0.75) over one conversation's turns, one per message."""

    def __init__(self, messages: Sequence[dict]) -> None:
        self.bm25 = BM25Okapi([bm25_tokens(m["content"]) for m in messages])

    def top(self, query: str, k: int = TOP) -> list[int]:
        """The positions of the k best turns with a score above zero; ties go to the latest, as the tool's do."""
        scores = self.bm25.get_scores(bm25_tokens(query))
        ranked = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: (-scores[i], -i))
        return ranked[:k]


class Outcome(NamedTuple):
    """One question in one form: where the tool and BM25 put its first evidence turn (None: not in the top 5)."""

    question: corpus.Question
    form: str
    query: str
    tool: int | None
    bm25: int | None
    empty_with_content: bool  # the tool answered nothing, yet a turn holds one of its content words
    first: str  # the tool's first passage header, to show a miss


def rank_of(passages: Sequence[Sequence[int]], evidence: Sequence[int]) -> int | None:
    """The rank of the first passage showing an evidence turn (a passage: its message and the neighbours under it)."""
    return next((rank for rank, shown in enumerate(passages) if any(p in evidence for p in shown)), None)


def message_passages(answer: str) -> list[list[int]]:
    """The message passages of the tool's answer, in order: each one's position, then its neighbours'."""
    passages: list[list[int]] = []
    current: list[int] | None = None  # the message passage a neighbour's line follows
    for line in answer.splitlines():
        if NUMBERED.match(line):
            found = PASSAGE.match(line)
            passages += [[int(found[1])]] if found else []
            current = passages[-1] if found else None
        elif (near := CONTEXT.match(line)) and current is not None:
            current.append(int(near[1]))
    return passages


QUERY_EMBEDDER: meaning.Embedder | None = None  # --embedding-model's, for the tool's search


def ask_tool(
    workspace: Path, question: corpus.Question, query: str, today: date, latencies: list[float]
) -> tuple[list[list[int]], str]:
    """The tool's answer as the conversation's own session asks: the message positions of its passages, in
    order, and the answer itself."""
    on_day: dict = {"today": today} if TAKES_TODAY else {}
    if QUERY_EMBEDDER is not None:
        on_day["meaning"] = QUERY_EMBEDDER
    began = time.perf_counter()
    answer = search(workspace, query, question.session, is_direct_chat, **on_day)
    latencies.append(time.perf_counter() - began)
    return message_passages(answer), answer


def evaluate(
    workspace: Path, conversation: corpus.Conversation, archived: int, today: date, latencies: list[float]
) -> list[Outcome]:
    """Every question of the conversation whose evidence was archived, in both forms, through the tool and
    through BM25 over the same archived turns."""
    turns = conversation.messages[:archived]
    baseline = Baseline(turns)
    outcomes = []
    for question in conversation.questions:
        if min(question.evidence) >= archived:
            continue  # still in the context, where no one needs recall
        for form in FORMS:
            query = question.keywords if form == "keywords" else question.question
            positions, answer = ask_tool(workspace, question, query, today, latencies)
            empty = not NUMBERED.search(answer)
            content = empty and any(
                corpus.holds(m["content"], word) for m in turns for word in corpus.content_words(question)
            )
            first = " / ".join(line.strip() for line in (NUMBERED.split(answer)[1:2] or [""])[0].splitlines())
            outcomes.append(
                Outcome(
                    question,
                    form,
                    query,
                    rank_of(positions[:TOP], question.evidence),
                    rank_of([[p] for p in baseline.top(query)], question.evidence),
                    content,
                    first,
                )
            )
    return outcomes


def archive(
    args: argparse.Namespace, root: Path, conversations: Sequence[corpus.Conversation]
) -> list[tuple[NanobotHome, int]]:
    """Each conversation in a nanobot home of its own (a user each, as LoCoMo scores them: the tool's word
    statistics then come from the same turns as BM25's), or with --shared-workspace all in one (a user with
    many chats), archived as --archive says. Returns each one's home and how many of its messages were
    archived."""
    homes = (
        [NanobotHome.create(root / str(n), "http://127.0.0.1:9/v1") for n in range(len(conversations))]
        if not args.shared_workspace
        else [NanobotHome.create(root, "http://127.0.0.1:9/v1")] * len(conversations)
    )
    if args.archive == "index":
        embedder = (
            Embedder(args.embedding_model, litellm_embed(args.embedding_model, args.embedding_api_base))
            if args.embedding_model
            else None
        )
        return [(home, archive_with_index(home, c, embedder)) for home, c in zip(homes, conversations, strict=True)]
    with job_redis(args.redis_url) as url:
        return [(home, archive_with_jobs(home, c, url)) for home, c in zip(homes, conversations, strict=True)]


def index_size(homes: Sequence[NanobotHome], conversations: Sequence[corpus.Conversation]) -> tuple[int, int]:
    """Bytes of the recall indexes on disk (their WAL included) and of the conversations' text they index."""
    files = {home.workspace / RECALL_INDEX for home in homes}
    size = sum(
        Path(f"{path}{suffix}").stat().st_size
        for path in files
        for suffix in ("", "-wal")
        if Path(f"{path}{suffix}").exists()
    )
    return size, sum(len(m["content"].encode("utf-8")) for c in conversations for m in c.messages)


def archive_with_index(home: NanobotHome, conversation: corpus.Conversation, embedder: Embedder | None = None) -> int:
    """The conversation as a nanobot session file, every message archived (nanobot's watermark at the end),
    then the worker's index refresh as its start-up runs it (again while it embeds: each refresh embeds a share)."""
    home.write_session(conversation.key, conversation.messages, last_archived=len(conversation.messages))
    index = RecallIndex(home.workspace, ZoneInfo("UTC"), embedder)  # the sandbox's config says UTC
    while index.refresh(home.sessions_dir).embedded:
        pass
    index.close()
    return len(conversation.messages)


def archive_with_jobs(home: NanobotHome, conversation: corpus.Conversation, redis_url: str) -> int:
    """The conversation as a session nothing has summarized yet, and one summarize job run by a real arq
    worker with the fake model on loopback: the job archives the messages before its cut (the keep rule:
    the last 2 messages stay in the context) and brings the recall index up to date, as in production."""
    import asyncio  # the worker's part (litellm, arq) is imported only when it runs: the smoke run skips it

    from worker.memory.recall_index.rows import archived_through
    from worker.nanobot.sessions import read_session

    home.write_session(conversation.key, conversation.messages)
    asyncio.run(run_jobs(home, conversation.key, redis_url))
    return archived_through(read_session(home.sessions_dir, conversation.key))


@contextmanager
def job_redis(url: str | None) -> Iterator[str]:
    """The Redis the jobs run on: `url`, or an embedded redis-server on a free port for the run's length."""
    if url is not None:
        yield url
        return
    from worker.connections import start_embedded

    url = f"redis://127.0.0.1:{free_port()}/0"
    embedded = start_embedded(url)
    try:
        yield url
    finally:
        embedded.stop()


async def run_jobs(home: NanobotHome, key: str, redis_url: str) -> None:
    """A manual summarize job for the session, then a burst worker until the queue is empty."""
    from arq.worker import Worker

    from harness.fakellm import FakeLLM, Reply
    from nanobot_hooks.contract.queue import enqueue_summary
    from nanobot_hooks.contract.records import SummarizeRequest
    from worker.connections import queue_client
    from worker.service.arq_worker import worker_options
    from worker.service.build import build_deps
    from worker.settings import Settings

    answer = {"summary": "## Topics\n- two friends catching up", "daily_notes": [], "facts": []}
    with FakeLLM(default=Reply(json.dumps(answer))) as llm:
        home.write_config(llm.url)
        deps = build_deps(Settings(redis_url=redis_url, config=home.config_path, summary_keep="messages:2"))
        redis = queue_client(redis_url, deps.settings.keys.queue)
        try:
            await enqueue_summary(redis, SummarizeRequest(session_key=key))
            worker = Worker(
                **{
                    **worker_options(deps.settings),
                    "ctx": {"deps": deps},
                    "burst": True,
                    "poll_delay": 0.05,
                    "handle_signals": False,
                }
            )
            await worker.main()
            await worker.close()
        finally:
            await redis.aclose()


# -- figures ----------------------------------------------------------------------------------------------------


def recall(outcomes: Sequence[Outcome], who: str, k: int) -> float:
    """The share of questions whose evidence the tool (or BM25) put in its first k passages."""
    ranks = [getattr(o, who) for o in outcomes]
    return sum(rank is not None and rank < k for rank in ranks) / len(ranks) if ranks else 0.0


def ratio(tool: float, bm25: float) -> float | None:
    return round(tool / bm25, 2) if bm25 else None


def figures(outcomes: Sequence[Outcome]) -> dict:
    """recall@1 and @5 of the tool and BM25, their ratios, the empty answers, for one language and form."""
    tool1, tool5 = recall(outcomes, "tool", 1), recall(outcomes, "tool", TOP)
    bm1, bm5 = recall(outcomes, "bm25", 1), recall(outcomes, "bm25", TOP)
    return {
        "questions": len(outcomes),
        "tool@1": round(tool1, 3),
        "bm25@1": round(bm1, 3),
        "ratio@1": ratio(tool1, bm1),
        "tool@5": round(tool5, 3),
        "bm25@5": round(bm5, 3),
        "ratio@5": ratio(tool5, bm5),
        "empty_with_content": sum(o.empty_with_content for o in outcomes),
    }


def group(outcome: Outcome) -> list[str]:
    """The question's category, `name+1` when its keywords are a name and one more word, `reply` when its
    evidence answers a turn holding the question's words, `2 sessions` when an earlier session's fact dates it,
    `rare name` when its friends seldom say each other's names."""
    words, question = outcome.question.keywords.split(), outcome.question
    return (
        [question.category]
        + (["name+1"] if len(words) == 2 and words[0] == question.name else [])
        + (["reply"] if question.reply else [])
        + (["2 sessions"] if question.anchor else [])
        + (["rare name"] if question.rare_name else [])
    )


def by_group(outcomes: Sequence[Outcome]) -> dict[str, list[Outcome]]:
    groups: dict[str, list[Outcome]] = {
        name: [] for name in (*CATEGORIES, "name+1", "reply", "2 sessions", "rare name")
    }
    for outcome in outcomes:
        for name in group(outcome):
            groups[name].append(outcome)
    return groups


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def show_ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "  n/a"


def print_table(results: dict[tuple[str, str], list[Outcome]]) -> None:
    print(f"{'':15} {'recall@1':^24}   {'recall@5 (evidence in the top 5)':^24}")
    print(f"{'language, form':15} {'tool':>6} {'BM25':>6} {'ratio':>8}   {'tool':>6} {'BM25':>6} {'ratio':>8}")
    for (language, form), outcomes in results.items():
        f = figures(outcomes)
        print(
            f"{language + ', ' + form:15} {f['tool@1']:6.2f} {f['bm25@1']:6.2f} {show_ratio(f['ratio@1']):>8}   "
            f"{f['tool@5']:6.2f} {f['bm25@5']:6.2f} {show_ratio(f['ratio@5']):>8}"
        )
    print(
        "headline, tool / BM25 with the evidence in the top 5: "
        + ", ".join(
            f"{language} {form} {show_ratio(figures(outcomes)['ratio@5']).strip()}"
            for (language, form), outcomes in results.items()
        )
    )


def print_groups(results: dict[tuple[str, str], list[Outcome]]) -> None:
    print("recall@5 by kind of question, tool / BM25 (questions):")
    for (language, form), outcomes in results.items():
        cells = [
            f"{name} {recall(g, 'tool', TOP):.2f}/{recall(g, 'bm25', TOP):.2f} ({len(g)})"
            for name, g in by_group(outcomes).items()
            if g
        ]
        print(f"  {language + ', ' + form:15} " + "  ".join(cells))


def print_goals(results: dict[tuple[str, str], list[Outcome]]) -> None:
    """Issue 24's goals, each met or not in this run."""
    print("goals (issue 24):")
    for language in LANGUAGES:
        words, asked = figures(results[language, "keywords"]), figures(results[language, "question"])
        checks = [
            ("top 5 with keywords >= 1.2x BM25", words["ratio@5"], 1.2),
            ("top 5 with questions >= 1.0x BM25", asked["ratio@5"], 1.0),
            ("recall@1 >= BM25's, keywords", words["ratio@1"], 1.0),
            ("recall@1 >= BM25's, questions", asked["ratio@1"], 1.0),
        ]
        verdicts = [
            f"{name}: {show_ratio(value)} {'met' if value and value >= goal else 'MISSED'}"
            for name, value, goal in checks
        ]
        print(f"  {language}: " + "; ".join(verdicts))


def print_misses(
    results: dict[tuple[str, str], list[Outcome]], count: int, conversations: dict[str, corpus.Conversation]
) -> None:
    """A few questions the tool missed and BM25 found: the question, its evidence, the tool's first passage."""
    for (language, form), outcomes in results.items():
        missed = [o for o in outcomes if o.tool is None and o.bm25 is not None][:count]
        for o in missed:
            evidence = conversations[o.question.session].messages[o.question.evidence[0]]["content"]
            print(
                f"  missed ({language}, {form}, {o.question.category}): {o.query!r}\n"
                f"    evidence, message {o.question.evidence[0]}: {evidence}\n"
                f"    the tool's first: {o.first or '(nothing)'}"
            )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: .venv/bin/python bench/bench_retrieval.py --misses 3. The conversations' last session "
        "is yesterday (or the day before --today), so 'last week' in a question means what it would "
        "mean to a user asking today.",
    )
    parser.add_argument("--conversations", type=int, default=20, help="conversations per language (20)")
    parser.add_argument(
        "--sessions",
        type=int,
        default=30,
        help="sessions (sittings, one every 3 to 14 days) per conversation (30: about 9 months)",
    )
    parser.add_argument("--facts", type=float, default=0.9, help="facts per session, on average (0.9)")
    parser.add_argument("--seed", type=int, default=24, help="the generator's seed (24)")
    parser.add_argument(
        "--today",
        type=date.fromisoformat,
        default=None,
        help="the day the questions are asked, YYYY-MM-DD (today); the same day and seed give "
        "the same conversations, and the search is given that day for 'last week'",
    )
    parser.add_argument(
        "--archive",
        choices=("jobs", "index"),
        default=None,
        help="how the turns are archived: 'jobs', one summary job per conversation in a real arq "
        "worker with the fake model (the full run's default), or 'index', the worker's "
        "index refresh called directly (--smoke's default: no Redis, no litellm)",
    )
    parser.add_argument(
        "--shared-workspace",
        action="store_true",
        help="all conversations in one nanobot workspace, as one user's many chats (each still "
        "searches only its own); by default each has a workspace of its own, as a new user",
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="a Redis for --archive jobs (default: an embedded redis-server on a free port)",
    )
    parser.add_argument(
        "--misses",
        type=int,
        default=0,
        metavar="N",
        help="print N questions per language and form that the tool missed and BM25 found",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a small, quick run (2 conversations x 8 sessions per language; the test suite's)",
    )
    parser.add_argument(
        "--embedding-model",
        default=None,
        help="embed turns and queries with this litellm model (NANOBOT_SUMMARY_EMBEDDING_MODEL; "
        "with --archive index), e.g. openai/multilingual-e5-small",
    )
    parser.add_argument(
        "--embedding-api-base", default=None, help="its OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"
    )
    args = parser.parse_args(argv)
    if args.embedding_model and args.archive == "jobs":
        parser.error("--embedding-model needs --archive index")
    if args.smoke:
        args.conversations, args.sessions = 2, 8
    args.archive = args.archive or ("index" if args.smoke or args.embedding_model else "jobs")
    return args


def main(argv: list[str] | None = None) -> int:
    global QUERY_EMBEDDER
    args = parse(argv)
    if args.embedding_model:
        QUERY_EMBEDDER = meaning.embedder(
            HookSettings(
                summary_embedding_model=args.embedding_model, summary_embedding_api_base=args.embedding_api_base
            )
        )
    today = args.today or date.today()
    conversations = {
        language: corpus.generate(language, args.conversations, args.sessions, today, args.seed, args.facts)
        for language in LANGUAGES
    }
    every = [c for chats in conversations.values() for c in chats]
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        homes = archive(args, Path(tmp), every)
        archiving = time.perf_counter() - began
        size = index_size([home for home, _ in homes], every)
        results: dict[tuple[str, str], list[Outcome]] = {(lang, form): [] for lang in LANGUAGES for form in FORMS}
        for chat, (home, archived) in zip(every, homes, strict=True):
            for outcome in evaluate(home.workspace, chat, archived, today, latencies):
                results[chat.language, outcome.form].append(outcome)
    report(
        args,
        today,
        conversations,
        results,
        latencies,
        {c.key: n for c, (_, n) in zip(every, homes, strict=True)},
        archiving,
        size,
    )
    return 0


def report(
    args: argparse.Namespace,
    today: date,
    conversations: dict[str, list[corpus.Conversation]],
    results: dict[tuple[str, str], list[Outcome]],
    latencies: list[float],
    archived: dict[str, int],
    archiving: float,
    size: tuple[int, int],
) -> None:
    print(
        f"retrieval benchmark: {args.conversations} conversations x {args.sessions} sessions per language, "
        f"seed {args.seed}, asked on {today} (the last sessions the day before; "
        f"{'the search is given that day' if TAKES_TODAY else 'the search reads dates against the clock'})"
    )
    for language, chats in conversations.items():
        questions = [q for c in chats for q in c.questions]
        kinds = ", ".join(f"{c} {sum(q.category == c for q in questions)}" for c in CATEGORIES)
        print(
            f"  {language}: {sum(len(c.messages) for c in chats):,} turns, {len(questions)} questions ({kinds}), "
            f"each asked in both forms"
        )
    turns, kept = sum(archived.values()), sum(len(c.messages) for chats in conversations.values() for c in chats)
    how = (
        f"by {len(archived)} summary jobs of a real arq worker (the fake model on loopback; each keeps its "
        "last 2 messages in the context)"
        if args.archive == "jobs"
        else "with the worker's index code (RecallIndex.refresh, as at its start-up)"
    )
    how += ", all in one workspace" if args.shared_workspace else ", each conversation in a workspace of its own"
    asked = {q for outcomes in results.values() for q in (o.question for o in outcomes)}
    left = sum(len(c.questions) for chats in conversations.values() for c in chats) - len(asked)
    print(
        f"archived {how}: {turns:,} of {kept:,} turns in {archiving:.1f} s; "
        f"questions whose evidence is not archived, left out: {left}"
    )
    print(
        f"recall index on disk: {size[0] / 1e3:,.0f} KB for {size[1] / 1e3:,.0f} KB of the conversations' text "
        f"({size[0] / max(size[1], 1):.2f}x)"
    )
    print(f"baseline: rank_bm25 BM25Okapi over each conversation's archived turns; tokens: {BM25_TOKENS}")
    print_table(results)
    print_groups(results)
    empty = {f"{language}, {form}": figures(o)["empty_with_content"] for (language, form), o in results.items()}
    print(
        "answered with nothing although a turn holds one of the question's content words (its keywords): "
        + ", ".join(f"{name} {count} of {len(results[tuple(name.split(', '))])}" for name, count in empty.items())
    )
    print(
        f"search latency over {len(latencies):,} calls: p50 {ms(percentile(latencies, 0.5))}, "
        f"p99 {ms(percentile(latencies, 0.99))}, max {ms(max(latencies))}"
    )
    print_goals(results)
    if args.misses:
        print_misses(results, args.misses, {c.key: c for chats in conversations.values() for c in chats})
    print(
        json.dumps(
            {
                "today": today.isoformat(),
                "seed": args.seed,
                "conversations": args.conversations,
                "sessions": args.sessions,
                "figures": {f"{language}/{form}": figures(o) for (language, form), o in results.items()},
                "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
                "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
                "index_bytes": size[0],
                "text_bytes": size[1],
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
