"""The page's safety in its pure parts and its token file: redirects stay on the page, the token file is the
user's alone (made 0600, refused when others may read it or it is another user's), the start line prints the
token to a terminal only, a fact typed on the page is capped, bidirectional controls are shown as marks.
The rules over a served page are tested in tests/scenarios/test_web_security.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.web.command import start_lines
from worker.web.guard import own_path
from worker.web.limits import MAX_FACT_CHARS, length_problem
from worker.web.render import visible_bidi
from worker.web.tokenfile import TokenFileError, load_or_create


@pytest.mark.parametrize(
    "location",
    [
        "//evil.example/",
        "/\\evil.example/",
        "///evil.example",
        "http://evil.example/",
        "/\t/evil.example",
        " /x",
        "evil.example",
        "",
        "/a b",
        "javascript:alert(1)",
    ],
)
def test_a_redirect_never_leaves_the_page(location: str) -> None:
    assert own_path(location) == "/"


@pytest.mark.parametrize("location", ["/", "/memory?undo=3", "/session?key=telegram%3A42", "/evil.example/"])
def test_a_path_of_the_page_is_kept(location: str) -> None:
    assert own_path(location) == location


def test_the_token_file_is_made_for_its_user_alone_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "state" / "nanobot-summary" / "web-token"
    token = load_or_create(path)
    assert len(token) >= 32 and path.read_text(encoding="utf-8").strip() == token
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert load_or_create(path) == token, "the next start uses the same token: bookmarks and cookies keep working"
    assert [p.name for p in path.parent.iterdir()] == ["web-token"], "no temporary file is left"


def test_a_token_file_others_may_read_or_anothers_own_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "web-token"
    load_or_create(path)
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="read or written by other users"):
        load_or_create(path)
    path.chmod(0o600)
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(path, 65534, 65534)
        with pytest.raises(TokenFileError, match="belongs to another user"):
            load_or_create(path)
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(TokenFileError):
        load_or_create(link)
    short = tmp_path / "short"
    short.write_text("abc\n")
    short.chmod(0o600)
    with pytest.raises(TokenFileError, match="fewer than"):
        load_or_create(short)


def test_the_start_line_carries_the_token_to_a_terminal_only(tmp_path: Path) -> None:
    file = tmp_path / "web-token"
    terminal = start_lines("127.0.0.1", 8766, "T" * 43, file, terminal=True, read_only=False)
    assert terminal[0] == f"nanobot-summary web: open http://127.0.0.1:8766/?token={'T' * 43}"
    journal = start_lines("127.0.0.1", 8766, "T" * 43, file, terminal=False, read_only=True)
    assert "T" * 43 not in "\n".join(journal)
    assert journal[0] == "nanobot-summary web (read-only): listening on http://127.0.0.1:8766/"
    assert str(file) in journal[1] and "nanobot-summary web --url" in journal[1]


def test_a_typed_fact_is_capped_by_what_would_be_written() -> None:
    assert length_problem("x" * MAX_FACT_CHARS) is None
    assert length_problem("- " + "x" * MAX_FACT_CHARS + "   ") is None, "the list mark and spaces are not written"
    problem = length_problem("x" * 58_539)
    assert problem and "58,539 characters" in problem and f"at most {MAX_FACT_CHARS:,}" in problem


def test_spoofing_bidi_controls_are_shown_in_text_and_kept_in_tags() -> None:
    page = '<option value="telegram:\u202e1337">telegram:\u202e1337</option><td>a\u2067b\u2069\u200f</td>'
    assert visible_bidi(page) == (
        '<option value="telegram:\u202e1337">telegram:[U+202E]1337</option><td>a[U+2067]b[U+2069]\u200f</td>'
    ), "a right-to-left mark spoofs nothing"
    assert visible_bidi("<p>plain</p>") == "<p>plain</p>"


def test_an_edit_box_holds_the_facts_exact_text() -> None:
    """What a textarea holds is what its form saves: a mark shown there would be written into MEMORY.md."""
    box = '<textarea name="new" rows="3">\u05d7\u05d9\u05e4\u05d4\u200f a\u202eb</textarea>'
    page = f"<td>x\u202ey</td><form>{box}</form><p>\u2066z</p>"
    assert visible_bidi(page) == f"<td>x[U+202E]y</td><form>{box}</form><p>[U+2066]z</p>"
