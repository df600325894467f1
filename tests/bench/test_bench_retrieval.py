"""The retrieval benchmark (bench/bench_retrieval.py) at its smoke size, and the conversations it measures with
(bench/retrieval_corpus.py): the figures it prints, its BM25 baseline, and questions whose evidence is right."""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta

import pytest

from tests.support.bench import load_bench

TODAY = date(2026, 11, 25)  # a Wednesday: last week is Monday 16 to Sunday 22 November
CELL = r" +(\d\.\d\d)"
RATIO = r" +(\d+\.\d\dx|n/a)"


@pytest.fixture(scope="module")
def corpus():
    """The corpus module as the benchmark imports it: loaded alone by load_script it would not be in
    sys.modules, where its dataclasses look their annotations up."""
    return load_bench("bench_retrieval").corpus


def test_the_benchmark_runs_in_its_smoke_size(capsys):
    assert load_bench("bench_retrieval").main(["--smoke", "--today", TODAY.isoformat()]) == 0
    stdout = capsys.readouterr().out
    last = json.loads(stdout.strip().splitlines()[-1])
    assert last["today"] == TODAY.isoformat() and last["conversations"] == 2
    for language in ("en", "zh"):
        for form in ("keywords", "question"):
            row = re.search(rf"^{language}, {form}{CELL}{CELL}{RATIO}{CELL}{CELL}{RATIO}$", stdout, re.MULTILINE)
            assert row, f"no figures for {language}, {form}:\n{stdout}"
            figures = last["figures"][f"{language}/{form}"]
            assert figures["questions"] >= 10
            for name in ("tool@1", "bm25@1", "tool@5", "bm25@5"):
                assert 0 <= figures[name] <= 1, (name, figures)
            assert figures["tool@1"] <= figures["tool@5"] and figures["bm25@1"] <= figures["bm25@5"]
            # The baseline really ran: BM25 finds some of the evidence, and the table shows what the JSON holds.
            assert figures["bm25@5"] > 0.1, figures
            assert float(row[5]) == round(figures["bm25@5"], 2) and float(row[4]) == round(figures["tool@5"], 2)
    assert "overlapping character bigrams" in stdout
    headline = re.search(r"^headline, tool / BM25 with the evidence in the top 5: (.*)$", stdout, re.MULTILINE)
    assert headline and all(
        f"{lang} {f} " in headline[1] + " " for lang in ("en", "zh") for f in ("keywords", "question")
    )
    assert re.search(r"search latency over \d+ calls: p50 [\d.]+ ms, p99 [\d.]+ ms", stdout)
    assert re.search(r"answered with nothing although .*: en, keywords \d+ of \d+", stdout)
    assert last["p99_ms"] >= last["p50_ms"] > 0


def test_the_conversations_can_share_one_workspace(capsys):
    """--shared-workspace: one user's many chats in one index (each conversation still asks as itself)."""
    assert load_bench("bench_retrieval").main(["--smoke", "--shared-workspace", "--today", TODAY.isoformat()]) == 0
    stdout = capsys.readouterr().out
    archived = re.search(
        r"^archived with the worker's index code .*, all in one workspace: ([\d,]+) of ([\d,]+) turns",
        stdout,
        re.MULTILINE,
    )
    assert archived and archived[1] == archived[2], stdout
    figures = json.loads(stdout.strip().splitlines()[-1])["figures"]
    assert len(figures) == 4 and all(f["bm25@5"] > 0.1 for f in figures.values()), figures


def test_the_full_runs_way_of_archiving_runs_real_summary_jobs(redis_url, capsys):
    """--archive jobs (the full run's default): one summary job per conversation in a real arq worker."""
    main = load_bench("bench_retrieval").main
    assert main(["--smoke", "--archive", "jobs", "--redis-url", redis_url, "--today", TODAY.isoformat()]) == 0
    stdout = capsys.readouterr().out
    archived = re.search(r"archived by 4 summary jobs of a real arq worker .*: ([\d,]+) of ([\d,]+) turns", stdout)
    assert archived, stdout
    done, turns = (int(n.replace(",", "")) for n in archived.groups())
    assert turns - 4 * 6 <= done < turns  # all but what each job's keep rule left in the context
    figures = json.loads(stdout.strip().splitlines()[-1])["figures"]
    assert all(f["bm25@5"] > 0.1 and f["questions"] >= 10 for f in figures.values()), figures


def test_the_baseline_cuts_chinese_into_bigrams_and_latin_into_words():
    bench = load_bench("bench_retrieval")
    assert bench.bm25_tokens("小雅去试镜了, OK? Anna's audition") == [
        "小雅",
        "雅去",
        "去试",
        "试镜",
        "镜了",
        "ok",
        "anna",
        "s",
        "audition",
    ]
    assert bench.bm25_tokens("好") == ["好"]
    baseline = bench.Baseline(
        [
            {"content": "Bye Anna!"},
            {"content": "I had my audition today"},
            {"content": "Hi Anna"},
            {"content": "the weather"},
        ]
    )
    assert baseline.top("Anna audition")[0] == 1 and 3 not in baseline.top("Anna audition")


def test_a_content_word_is_held_as_a_whole_word_in_latin_script_and_as_a_substring_in_chinese(corpus):
    assert corpus.holds("Bye Anna!", "anna") and corpus.holds("小雅晚安！", "小雅")
    assert not corpus.holds("Annabel called", "Anna") and not corpus.holds("a partner", "art")


def test_every_questions_evidence_holds_its_fact_and_only_those_turns_do(corpus):
    for language in ("en", "zh"):
        for conversation in corpus.generate(language, 4, 25, TODAY):
            assert len(conversation.questions) >= 20
            for question in conversation.questions:
                holding = {n for n, m in enumerate(conversation.messages) if question.detail in m["content"]}
                assert question.evidence and set(question.evidence) == holding, (question, holding)
                said = [conversation.messages[n] for n in question.evidence]
                assert all(m["role"] == said[0]["role"] for m in said)  # the fact's owner says it


def test_the_conversations_look_like_the_ones_the_tool_meets(corpus):
    english, chinese = corpus.generate("en", 3, 25, TODAY), corpus.generate("zh", 3, 25, TODAY)
    assert [c.messages for c in english] == [c.messages for c in corpus.generate("en", 3, 25, TODAY)]
    for conversation in english + chinese:
        stamps = [datetime.fromisoformat(m["timestamp"]) for m in conversation.messages]
        assert all(s.tzinfo is None for s in stamps) and stamps == sorted(stamps)  # naive local, as nanobot writes
        assert stamps[-1].date() == TODAY - timedelta(days=1) and len({s.date() for s in stamps}) == 25
        for name in conversation.names:  # the names recur (greetings, goodbyes, reactions), or are seldom said
            said = sum(name in m["content"] for m in conversation.messages)
            if conversation.rare_names:
                assert 0 < said < len(conversation.messages) / 20, (name, said)
            else:
                assert said > len(conversation.messages) / 6, (name, said)
        assert not any(
            "\x00" in m["content"] or m["content"].startswith((",", "，", "!", " ")) for m in conversation.messages
        ), "an unsaid name leaves no trace"
    assert {c.rare_names for c in english + chinese} == {True, False}
    questions = [q for c in english + chinese for q in c.questions]
    assert {q.category for q in questions} == {"exact", "paraphrase", "when", "dated"}
    # Six conversations' questions: one kind of fact of the fourteen asks with 吗, and a third of the facts are told in
    # reply to a question about their topic (the question then asked may be another of the kind's).
    asked = [q.question for c in corpus.generate("zh", 6, 25, TODAY) for q in c.questions]
    assert not any(" " in q for q in asked)  # typed as Chinese users type
    for word in ("什么", "为什么", "哪里", "什么时候", "吗"):
        assert any(word in q for q in asked), word
    dated = [q for q in questions if q.category == "dated"]
    assert any("last week" in q.question for q in dated) and any("上个月" in q.question for q in dated)
    assert any(re.search(r"in [A-Z][a-z]+ 20\d\d\?$", q.question) for q in dated)


def test_a_question_about_last_week_has_its_evidence_in_last_week(corpus):
    monday = TODAY - timedelta(days=TODAY.weekday())
    for language, phrase in (("en", "last week"), ("zh", "上周")):
        for conversation in corpus.generate(language, 4, 25, TODAY):
            for question in conversation.questions:
                if question.category == "dated" and phrase in question.question:
                    day = datetime.fromisoformat(conversation.messages[question.evidence[0]]["timestamp"]).date()
                    assert monday - timedelta(days=7) <= day < monday, (question, day)


def test_a_question_over_two_sessions_asks_a_later_fact_dated_by_an_earlier_one(corpus):
    for language in ("en", "zh"):
        for conversation in corpus.generate(language, 4, 25, TODAY):
            spans = [q for q in conversation.questions if q.anchor]
            assert 0 < len(spans) <= corpus.SPANS
            for question in spans:
                days = {
                    datetime.fromisoformat(conversation.messages[n]["timestamp"]).date()
                    for n in (*question.evidence, *question.anchor)
                }
                assert len(days) == 2 and max(question.anchor) < min(question.evidence), question
                anchor = next(f for f in conversation.facts if tuple(f.evidence) == question.anchor)
                assert anchor.slots["detail"] in question.question and anchor.slots["detail"] in question.keywords
                assert question.name in question.keywords and question.detail not in question.keywords
