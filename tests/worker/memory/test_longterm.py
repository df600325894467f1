"""MEMORY.md: the managed part, dedup against the whole file, corrections in place, the cap, atomic writes, the
sidecar of each fact's importance, day and session, and the migration of files that kept them in comments."""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.memory import longterm
from worker.memory.dedup import normalize
from worker.memory.entries import DailyNotes, Fact
from worker.memory.longterm import BEGIN, END, Meta, apply, known_facts, load_meta, locate, sidecar_path, write_facts
from worker.memory.writer import MemoryFiles

TODAY = "2026-11-20"


def facts_in(text: str) -> list[str]:
    """The fact lines of the managed part, in order."""
    span = locate(text)
    assert span is not None
    return [line for line in text[span[0] : span[1]].split("\n")[1:-1] if line.strip() and not line.startswith("#")]


def meta_of(path: Path, fact: str) -> Meta:
    return load_meta(sidecar_path(path))[normalize(fact)]


def write(path: Path, facts: list[Fact], language: str = "en", today: str = TODAY, max_facts: int = 300):
    return write_facts(path, facts, language, today, max_facts)


def test_a_missing_file_is_created_with_just_the_managed_part(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "MEMORY.md"
    stats = write(path, [Fact(text="The user's name is Ada", tag="permanent", category="people")])
    text = path.read_text(encoding="utf-8")
    assert stats.added == 1
    assert text.startswith(BEGIN) and text.endswith(END + "\n")
    assert "### People\nThe user's name is Ada\n" in text
    assert meta_of(path, "The user's name is Ada") == Meta(3, "2026-11-20", None)


def test_nothing_to_add_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    stats = write(path, [Fact(text="it rains", tag="ephemeral"), Fact(text="trivia", importance=1)])
    assert stats.skipped == 2 and not path.exists()


@pytest.mark.parametrize(
    "user_text",
    [
        "# Long-term Memory\n\n## Preferences\n\n(User preferences learned over time)\n",
        "no newline at the end",
        "ends with a blank line\n\n",
    ],
)
def test_without_markers_the_part_is_appended_after_every_existing_byte(tmp_path: Path, user_text: str) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(user_text.encode())
    write(path, [Fact(text="Deploys run from the ci branch", category="decisions")])
    data = path.read_bytes()
    assert data.startswith(user_text.encode())
    rest = data[len(user_text.encode()) :].decode()
    assert rest.lstrip("\n").startswith(BEGIN) and rest.endswith(END + "\n")
    assert "\n\n" + BEGIN in data.decode(), "a blank line separates the user's text from the part"


def test_the_same_write_twice_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    facts = [
        Fact(text="The user prefers short answers", category="preferences", importance=4),
        Fact(text="Gateway runs on port 18790", category="configuration"),
        Fact(text="Fixed the Hugo build by pinning 0.139", category="solutions"),
        Fact(text="Ada now prefers long answers", tag="correction", replaces="The user prefers short answers"),
    ]
    write(path, facts)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    stats = write(path, facts, today="2026-11-21")
    assert (stats.added, stats.replaced) == (0, 0)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime, "not even rewritten"


@pytest.mark.parametrize(
    "variant",
    [
        "user prefers python 3.12, NOT java",
        "Ｕｓｅｒ ｐｒｅｆｅｒｓ Ｐｙｔｈｏｎ ３．１２，ｎｏｔ Ｊａｖａ．",
        "User prefers Python 3.12 — not Java!",
        "  User prefers\tPython 3.12, not Java  ",
    ],
)
def test_a_fact_differing_only_by_punctuation_width_or_case_is_not_added_twice(tmp_path: Path, variant: str) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="User prefers Python 3.12, not Java.", category="preferences")])
    stats = write(path, [Fact(text=variant, category="preferences")])
    assert stats.added == 0 and stats.skipped == 1
    assert len(facts_in(path.read_text(encoding="utf-8"))) == 1


def test_chinese_punctuation_and_width_variants_are_one_fact(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="用户偏好：Python，不用 Java。", category="preferences")], language="zh")
    stats = write(
        path,
        [
            Fact(text="用户偏好:Python,不用Java.", category="preferences"),
            Fact(text="用户偏好：Ｐｙｔｈｏｎ，不用Ｊａｖａ", category="preferences"),
        ],
        language="zh",
    )
    assert stats.added == 0
    assert facts_in(path.read_text(encoding="utf-8")) == ["用户偏好：Python，不用 Java。"]


def test_near_duplicates_are_skipped_but_different_numbers_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="The gateway listens on port 18790", category="configuration")])
    stats = write(
        path,
        [Fact(text="The gateway listens on port 18790 by default"), Fact(text="The gateway listens on port 18791")],
    )
    assert (stats.added, stats.skipped) == (1, 1)
    assert facts_in(path.read_text(encoding="utf-8")) == [
        "The gateway listens on port 18790",
        "The gateway listens on port 18791",
    ]


def test_duplicates_of_user_lines_outside_the_part_are_not_added(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("# Long-term Memory\n\n## Preferences\n- Prefers dark mode in every editor.\n", encoding="utf-8")
    stats = write(
        path,
        [
            Fact(text="prefers dark mode in every editor", category="preferences"),
            Fact(text="Prefers tabs over spaces", category="preferences"),
        ],
    )
    assert (stats.added, stats.skipped) == (1, 1)
    assert facts_in(path.read_text(encoding="utf-8")) == ["Prefers tabs over spaces"]


def test_a_correction_replaces_the_old_fact_in_place(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(
        path,
        [
            Fact(text="Lives in Berlin", category="people"),
            Fact(text="Prefers tea over coffee", category="preferences"),
            Fact(text="Uses Neovim with LazyVim", category="preferences"),
        ],
        today="2026-11-01",
    )
    stats = write(
        path,
        [Fact(text="Prefers coffee over tea since November", tag="correction", replaces="prefers tea over coffee.")],
    )
    text = path.read_text(encoding="utf-8")
    assert stats.replaced == 1 and stats.added == 0
    assert "Prefers tea over coffee" not in text
    assert facts_in(text) == ["Prefers coffee over tea since November", "Uses Neovim with LazyVim", "Lives in Berlin"]
    assert "\nPrefers coffee over tea since November\n" in text
    assert meta_of(path, "Prefers coffee over tea since November") == Meta(3, "2026-11-20", None)


def test_a_correction_without_a_usable_quote_finds_its_fact_by_its_own_text(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(
        path,
        [Fact(text="用户喜欢咖啡", category="preferences"), Fact(text="用户住在上海", category="people")],
        language="zh",
    )
    stats = write(path, [Fact(text="用户不喜欢咖啡", tag="correction", replaces=None)], language="zh")
    assert stats.replaced == 1
    assert facts_in(path.read_text(encoding="utf-8")) == ["用户不喜欢咖啡", "用户住在上海"]


def test_a_correction_with_nothing_to_correct_is_added(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="Lives in Berlin", category="people")])
    stats = write(path, [Fact(text="Works at a bakery in Lisbon", tag="correction", replaces="Works at a bank")])
    assert (stats.replaced, stats.added) == (0, 1)


def test_ephemeral_and_unimportant_facts_stay_out(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    stats = write(
        path,
        [
            Fact(text="Remember: the build is red today", tag="ephemeral", importance=5),
            Fact(text="The cat is grey", importance=2),
            Fact(text="Proxy is configured in ~/.npmrc", importance=2),
        ],
    )
    assert (stats.added, stats.skipped) == (1, 2)
    assert facts_in(path.read_text(encoding="utf-8")) == ["Proxy is configured in ~/.npmrc"]


def test_headings_are_stable_and_in_the_files_language(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="用户喜欢简洁的回答", category="preferences")], language="zh")
    write(path, [Fact(text="Gateway port is 18790", category="configuration")], language="en")
    text = path.read_text(encoding="utf-8")
    assert "## 对话中记住的信息" in text and "### 偏好" in text and "### 配置" in text
    assert "Preferences" not in text and "Configuration" not in text
    assert text.index("### 偏好") < text.index("### 配置")


def test_the_cap_holds_with_ten_thousand_candidates(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    candidates = [
        Fact(
            text=f"candidate fact number {i} about topic {i * 7919 % 10007}", importance=i % 5 + 1, category="projects"
        )
        for i in range(10_000)
    ]
    stats = write(path, candidates, max_facts=300)
    text = path.read_text(encoding="utf-8")
    levels = [meta_of(path, fact).importance for fact in facts_in(text)]
    assert len(levels) == 300 and stats.added == 300
    assert set(levels) == {5}, "only the most important survive"
    assert stats.added + stats.skipped == 10_000


def test_when_full_the_least_important_and_oldest_go_first(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="old but vital: blood type is A+", importance=5, category="people")], today="2026-01-01")
    write(path, [Fact(text="old and plain: likes green tea", importance=3)], today="2026-01-02")
    write(path, [Fact(text="newer and plain: uses a standing desk", importance=3)], today="2026-06-01")
    stats = write(path, [Fact(text="new and notable: moved to Lisbon", importance=4, category="people")], max_facts=3)
    assert (stats.added, stats.evicted) == (1, 1)
    kept = facts_in(path.read_text(encoding="utf-8"))
    assert "old and plain: likes green tea" not in kept
    assert len(kept) == 3 and "old but vital: blood type is A+" in kept
    # Among equals the newer stays.
    stats = write(path, [Fact(text="a plain new fact", importance=3)], max_facts=3)
    assert (stats.added, stats.evicted) == (1, 1)
    assert "newer and plain: uses a standing desk" not in facts_in(path.read_text(encoding="utf-8"))


def test_a_candidate_below_everything_in_a_full_file_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="blood type is A+", importance=5), Fact(text="allergic to peanuts", importance=5)])
    before = path.read_bytes()
    stats = write(path, [Fact(text="moved to Lisbon", importance=4)], max_facts=2)
    assert (stats.added, stats.skipped, stats.evicted) == (0, 1, 0)
    assert path.read_bytes() == before


_USER_BYTES = st.binary(max_size=300).filter(lambda b: b"nanobot-summary" not in b)


def _outside(data: bytes) -> tuple[bytes, bytes]:
    text = data.decode("utf-8", errors="surrogateescape")
    span = locate(text)
    assert span is not None
    return (
        text[: span[0]].encode("utf-8", errors="surrogateescape"),
        text[span[1] :].encode("utf-8", errors="surrogateescape"),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=_USER_BYTES, after=_USER_BYTES, fact=st.text(min_size=1, max_size=80))
def test_user_bytes_outside_the_part_survive_byte_for_byte(before: bytes, after: bytes, fact: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "MEMORY.md"
        path.write_bytes(before)
        write(path, [Fact(text="Seed fact: the user's name is Ada", tag="permanent")])
        assert path.read_bytes().startswith(before)
        path.write_bytes(path.read_bytes() + b"\n" + after)  # the user writes below our part as well
        outside = _outside(path.read_bytes())
        write(
            path,
            [
                Fact(text=fact, importance=5),
                Fact(text="Ada prefers rust", tag="correction", replaces="Seed fact: the user's name is Ada"),
            ],
        )
        data = path.read_bytes()
        assert _outside(data) == outside
        assert data.startswith(before) and data.endswith(b"\n" + after)
        assert "Ada prefers rust" in data.decode("utf-8", errors="replace")


def test_edits_inside_the_part_are_kept_as_facts(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="Lives in Berlin", category="people"), Fact(text="Prefers tea", category="preferences")])
    text = path.read_text(encoding="utf-8")
    # Someone (the user, nanobot's Dream) deletes one fact and adds another by hand.
    text = text.replace("\nPrefers tea\n", "\n- Speaks Portuguese\n")
    path.write_text(text, encoding="utf-8")
    write(path, [Fact(text="Owns a Raspberry Pi 5", category="projects")], today="2026-11-22")
    kept = path.read_text(encoding="utf-8")
    assert "Prefers tea" not in kept
    assert "\nSpeaks Portuguese\n" in kept and "\nOwns a Raspberry Pi 5\n" in kept
    assert meta_of(path, "Speaks Portuguese") == Meta(3, "2026-11-22", None), "a hand-added fact: defaults"
    assert meta_of(path, "Lives in Berlin") == Meta(3, "2026-11-20", None), "the others keep theirs"
    assert normalize("Prefers tea") not in load_meta(sidecar_path(path)), "the deleted fact's record goes"


def test_an_orphan_begin_marker_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    user = f"# Notes\n{BEGIN} pasted by hand -->\nmy line\n"
    path.write_text(user, encoding="utf-8")
    write(path, [Fact(text="Lives in Berlin", category="people")])
    assert path.read_text(encoding="utf-8").startswith(user)
    write(path, [Fact(text="Prefers tea", category="preferences")])
    text = path.read_text(encoding="utf-8")
    assert text.startswith(user) and text.count(END) == 1
    assert facts_in(text) == ["Prefers tea", "Lives in Berlin"]


def test_an_external_edit_between_read_and_replace_is_merged_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("# Memory\n- my own line\n", encoding="utf-8")
    real = longterm.store.temp_beside
    calls: list[int] = []

    def edit_then_write(target: Path, data: bytes, mode: int | None = None) -> Path:
        # Plays nanobot's Dream: it writes the file in place and takes no lock.
        if target.name != "MEMORY.md":  # the sidecar
            return real(target, data, mode)
        if not calls:
            with target.open("a", encoding="utf-8") as handle:
                handle.write("- a line Dream wrote meanwhile\n")
        calls.append(1)
        return real(target, data, mode)

    monkeypatch.setattr(longterm.store, "temp_beside", edit_then_write)
    stats = write(path, [Fact(text="Lives in Berlin", category="people")])
    text = path.read_text(encoding="utf-8")
    assert len(calls) == 2, "the first attempt saw the change and merged again"
    assert stats.added == 1
    assert text.startswith("# Memory\n- my own line\n- a line Dream wrote meanwhile\n")
    assert "\nLives in Berlin\n" in text
    assert not list(tmp_path.glob(".MEMORY.md.*.tmp")), "no temp file is left behind"


def test_known_facts_lists_ours_by_importance_then_the_users_bullets(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    assert known_facts(path) == []
    path.write_text("# Memory\n(placeholder)\n- Speaks Portuguese\n", encoding="utf-8")
    write(
        path,
        [
            Fact(text="Lives in Berlin", category="people", importance=3),
            Fact(text="Remember: allergic to peanuts", category="people", importance=5),
        ],
    )
    assert known_facts(path) == ["Remember: allergic to peanuts", "Lives in Berlin", "Speaks Portuguese"]
    assert known_facts(path, limit=1) == ["Remember: allergic to peanuts"]


def test_apply_is_pure_and_touches_only_the_part() -> None:
    text = "intro\n\n" + apply("", [Fact(text="Lives in Berlin")], "en", TODAY, 10)[0] + "outro\n"
    new, stats = apply(text, [Fact(text="Prefers tea", category="preferences")], "en", TODAY, 10)
    assert stats.added == 1 and new.startswith("intro\n\n") and new.endswith(END + "\noutro\n")


KINDS = ("worker {n} round {i} likes green tea", "project {n}-{i} deploys through the staging cluster")


def _worker_process(workspace: str, number: int, rounds: int, ready: Any) -> None:
    memory = MemoryFiles(Path(workspace), "UTC", max_facts=10_000)
    ready.wait()  # every process imported and ready: they start writing together
    for i in range(rounds):
        note = DailyNotes(
            date=TODAY,
            first_timestamp=f"{TODAY}T{number:02d}:{i:02d}:00",
            last_timestamp=f"{TODAY}T{number:02d}:{i:02d}:30",
            topics=[f"topic w{number} r{i}"],
        )
        facts = [Fact(text=text.format(n=number, i=i), importance=4) for text in KINDS]
        memory.write_now(f"cli:w{number}", [note], facts, "en")


@pytest.mark.slow  # worker processes
def test_worker_processes_on_one_day_file_and_memory_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers, rounds = 4, 25
    ready = context.Barrier(workers)
    processes = [
        context.Process(target=_worker_process, args=(str(tmp_path), n, rounds, ready)) for n in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    day = (tmp_path / "memory" / f"{TODAY}.md").read_text(encoding="utf-8")
    memory = (tmp_path / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert day.count("<!-- nanobot-summary:notes") == workers * rounds
    assert day.count(f"# {TODAY}\n") == 1
    facts = facts_in(memory)
    for n in range(workers):
        for i in range(rounds):
            assert day.count(f"- topic w{n} r{i}\n") == 1
            for text in KINDS:
                assert facts.count(text.format(n=n, i=i)) == 1
    assert len(facts) == workers * rounds * 2


def test_a_file_converted_to_crlf_keeps_one_part_and_its_line_ends_outside(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"# Memory\r\n- my line\r\n")
    write(path, [Fact(text="Lives in Berlin", category="people")])
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    write(path, [Fact(text="Prefers tea", category="preferences")])
    data = path.read_bytes()
    assert data.startswith(b"# Memory\r\n- my line\r\n") and data.endswith(END.encode() + b"\r\n")
    assert data.count(BEGIN.encode()) == 1
    assert facts_in(data.decode().replace("\r\n", "\n")) == ["Prefers tea", "Lives in Berlin"]


async def test_concurrent_jobs_in_one_worker_process_lose_nothing(tmp_path: Path) -> None:
    # arq runs up to max_jobs at once in one process: each write runs in its own thread.
    memory = MemoryFiles(tmp_path, "UTC", max_facts=10_000)

    def job(number: int) -> Any:
        note = DailyNotes(
            date=TODAY,
            first_timestamp=f"{TODAY}T10:{number:02d}:00",
            last_timestamp=f"{TODAY}T10:{number:02d}:30",
            topics=[f"topic of job {number}"],
        )
        facts = [Fact(text=text.format(n=number, i=number), importance=4) for text in KINDS]
        return memory.write(f"cli:j{number}", [note], facts, "en")

    results = await asyncio.gather(*(job(n) for n in range(20)))
    assert all(r.notes_sections == 1 and r.facts_added == 2 for r in results)
    day = (tmp_path / "memory" / f"{TODAY}.md").read_text(encoding="utf-8")
    facts = facts_in(memory.memory_path.read_text(encoding="utf-8"))
    assert all(day.count(f"- topic of job {n}\n") == 1 for n in range(20))
    assert len(facts) == 40 and len(set(facts)) == 40


def test_a_symlinked_memory_file_stays_a_symlink(tmp_path: Path) -> None:
    from worker.memory.longterm import write_facts

    real = tmp_path / "dotfiles" / "MEMORY.md"
    real.parent.mkdir()
    real.write_text("# mine\n", encoding="utf-8")
    link = tmp_path / "memory" / "MEMORY.md"
    link.parent.mkdir()
    link.symlink_to(real)
    write_facts(
        link,
        [Fact(text="Prefers short answers, remember this", tag="permanent", importance=5)],
        "en",
        "2026-11-20",
        300,
    )
    assert link.is_symlink() and link.resolve() == real
    text = real.read_text(encoding="utf-8")
    assert text.startswith("# mine\n") and "Prefers short answers" in text


# -- the sidecar: importance, day and session beside the file, not in every prompt ----------------------

OLD_FORMAT = (
    "# Long-term Memory\n\n- I am Li Lei (the user's own line)\n\n"
    f"{BEGIN} lang=en: facts kept by the summary worker, one per line; edits are kept; "
    "'i4 2026-11-20 telegram:42' = importance 4 of 5, learned 2026-11-20 in session telegram:42 -->\n"
    "## Remembered from conversations\n\n"
    "### Preferences\n"
    "- Prefers short answers <!-- i5 2026-11-02 telegram:42 -->\n"
    "- Speaks Portuguese\n\n"
    "### Configuration\n"
    "- Gateway listens on port 18790 <!-- i4 2026-11-03 cli:direct -->\n"
    "- Odd key <!-- i3 2026-11-04 slack:T1%3AU%20x -->\n"
    f"{END}\n\nmy text below\n"
)


def test_a_file_with_line_comments_migrates_on_its_first_write(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text(OLD_FORMAT, encoding="utf-8")
    outside = _outside(path.read_bytes())
    write(path, [Fact(text="Uses Neovim with LazyVim", category="preferences")], today="2026-11-22")
    text = path.read_text(encoding="utf-8")
    assert _outside(path.read_bytes()) == outside, "every byte outside the part is the user's"
    assert "<!-- i" not in text and f"{BEGIN} lang=en -->\n" in text
    assert facts_in(text) == [
        "Prefers short answers",
        "Speaks Portuguese",
        "Uses Neovim with LazyVim",
        "Gateway listens on port 18790",
        "Odd key",
    ]
    assert meta_of(path, "Prefers short answers") == Meta(5, "2026-11-02", "telegram:42")
    assert meta_of(path, "Gateway listens on port 18790") == Meta(4, "2026-11-03", "cli:direct")
    assert meta_of(path, "Odd key") == Meta(3, "2026-11-04", "slack:T1:U x")
    assert meta_of(path, "Speaks Portuguese") == Meta(3, "2026-11-22", None), "a hand-added line: defaults"
    assert meta_of(path, "Uses Neovim with LazyVim") == Meta(3, "2026-11-22", None)
    # Ranks survive the move: the cap still evicts the least important and oldest first.
    stats = write(path, [Fact(text="Moved to Lisbon", importance=4, category="people")], max_facts=5)
    assert stats.evicted == 1 and "Odd key" not in facts_in(path.read_text(encoding="utf-8"))


def test_an_edited_fact_keeps_its_record(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write_facts(
        path,
        [Fact(text="Remember: the gateway listens on port 18790", category="configuration")],
        "en",
        "2026-11-01",
        300,
        session="telegram:42",
    )
    path.write_text(path.read_text(encoding="utf-8").replace("port 18790", "port 18790 behind Caddy"), encoding="utf-8")
    write(path, [Fact(text="Prefers tea", category="preferences")], today="2026-11-22")
    assert meta_of(path, "Remember: the gateway listens on port 18790 behind Caddy") == Meta(
        4, "2026-11-01", "telegram:42"
    )


def test_an_unreadable_sidecar_costs_the_metadata_not_the_facts(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="Lives in Berlin", importance=5)], today="2026-11-01")
    sidecar_path(path).write_text("{not json", encoding="utf-8")
    stats = write(path, [Fact(text="Prefers tea", category="preferences")], today="2026-11-22")
    assert stats.added == 1 and facts_in(path.read_text(encoding="utf-8")) == ["Prefers tea", "Lives in Berlin"]
    assert meta_of(path, "Lives in Berlin") == Meta(3, "2026-11-22", None)


def test_the_part_at_the_cap_is_facts_and_headings(tmp_path: Path) -> None:
    """Markers, bullets and metadata are at most 5% of the part's tokens (nanobot sends it in every prompt)."""
    from worker.text.tokens import best_counter

    words = (
        "the user",
        "prefers",
        "deploys",
        "the staging server",
        "on port",
        "with Redis",
        "every Friday",
        "backups to",
        "Hugo",
        "用户喜欢简洁的回答",
        "配置",
        "dark mode",
        "fixed the bug in",
        "cron",
    )
    facts = [
        Fact(
            text=" ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 6)) + f" #{i}",
            importance=3 + i % 3,
            category=("preferences", "configuration", "projects", "people")[i % 4],
        )
        for i in range(300)
    ]
    path = tmp_path / "MEMORY.md"
    for n in range(0, 300, 100):
        write_facts(path, facts[n : n + 100], "en", TODAY, 300, session=f"telegram:{n}")
    text = path.read_text(encoding="utf-8")
    span = locate(text)
    assert span is not None and len(facts_in(text)) == 300
    share = longterm.markup_share(text[span[0] : span[1]], best_counter())
    assert share <= 0.05, f"{share:.1%} of the part is neither fact nor heading"
    # The old format, for comparison: the same part with each fact's comment, over half of it.
    old = longterm.markup_share(OLD_FORMAT[OLD_FORMAT.index(BEGIN) : OLD_FORMAT.index(END) + len(END)], best_counter())
    assert old > 0.3


def test_one_sessions_facts_are_found_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text(OLD_FORMAT, encoding="utf-8")
    write_facts(
        path, [Fact(text="Owns a Raspberry Pi 5", category="projects")], "en", TODAY, 300, session="telegram:42"
    )
    write_facts(path, [Fact(text="Works at a bakery", category="people")], "en", TODAY, 300, session="cli:direct")
    before = path.read_bytes()
    assert longterm.forget_session(path, "telegram:42", TODAY, dry_run=True) == [
        "Prefers short answers",
        "Owns a Raspberry Pi 5",
    ]
    assert path.read_bytes() == before, "a dry run changes nothing"
    outside = _outside(before)
    assert longterm.forget_session(path, "telegram:42", TODAY) == ["Prefers short answers", "Owns a Raspberry Pi 5"]
    assert _outside(path.read_bytes()) == outside
    assert facts_in(path.read_text(encoding="utf-8")) == [
        "Speaks Portuguese",
        "Gateway listens on port 18790",
        "Odd key",
        "Works at a bakery",
    ]
    assert longterm.forget_session(path, "telegram:42", TODAY) == []
    assert longterm.forget_session(tmp_path / "none.md", "telegram:42", TODAY) == []


def test_the_recall_index_dates_facts_from_the_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    write(path, [Fact(text="Lives in Berlin", category="people")], today="2026-11-03")
    text = path.read_text(encoding="utf-8")
    dated = {line: learned for _, _, line, learned in longterm.dated_lines(text, load_meta(sidecar_path(path)))}
    assert dated["Lives in Berlin"] == "2026-11-03"
    assert longterm.dated_lines(OLD_FORMAT)[2][3] is None  # the user's own line
    assert ("Gateway listens on port 18790", "2026-11-03") in [
        (t, d) for _, _, t, d in longterm.dated_lines(OLD_FORMAT)
    ]
