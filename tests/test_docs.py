"""The documentation stays true to the code: docs/configuration.md is what the settings classes generate (every
variable they read, with its default and description), every link between the pages leads somewhere, and the
README stays a front door."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from nanobot_hooks.settings import HookSettings
from tests.support.paths import ROOT
from worker.settings import OWN_PREFIXES, Settings

CONFIGURATION = ROOT / "docs" / "configuration.md"
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300


def script(name: str) -> ModuleType:
    """One of scripts/, the developer's tools that write and check generated parts of the docs."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_docs() -> ModuleType:
    """scripts/config_docs.py, which writes and checks docs/configuration.md."""
    return script("config_docs")


def test_architectures_map_names_every_module_by_its_own_first_sentence() -> None:
    """The map is generated from the modules (scripts/architecture_map.py): a module added, removed, renamed or
    described anew makes this fail until the map is written again."""
    tool = script("architecture_map")
    current = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert tool.page(current) == current, (
        "ARCHITECTURE.md's map is out of date: run .venv/bin/python scripts/architecture_map.py --write"
    )
    listed = set(re.findall(r"^  - `([a-z_/]+)`: ", current, re.MULTILINE))
    assert {"contract/keys", "turn/decide", "summarize/jobs", "web/guard"} <= listed


def test_the_configuration_page_is_what_the_settings_generate() -> None:
    generated = config_docs().page()
    assert CONFIGURATION.read_text(encoding="utf-8") == generated, (
        "docs/configuration.md is out of date: run .venv/bin/python scripts/config_docs.py --write"
    )


def test_every_variable_the_settings_read_is_on_the_configuration_page_with_its_description() -> None:
    page = CONFIGURATION.read_text(encoding="utf-8")
    rows = {match.group(1): match.group(0) for match in re.finditer(r"^\| `([A-Z_]+)` \|.*$", page, re.MULTILINE)}
    for field, info in Settings.model_fields.items():
        name = Settings.env_name(field)
        assert name in rows, f"{name} is not on docs/configuration.md"
        assert " ".join((info.description or "").split()).replace("|", "\\|") in rows[name], name
    # Every variable of ours that the code names anywhere is a setting, so it is on the page too (the page's own
    # script is left out: it shows a misspelled name on purpose).
    ours = re.compile(r"\b(?:%s)[A-Z_]*[A-Z]\b" % "|".join(OWN_PREFIXES))
    named = {
        name
        for folder in ("worker", "nanobot_hooks", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "config_docs.py"
        for name in ours.findall(path.read_text(encoding="utf-8"))
    }
    assert named and named <= set(rows), f"named in the code but not on the page: {sorted(named - set(rows))}"
    hooks = page.split("## Read by the worker only")[0]
    for field in HookSettings.model_fields:
        assert f"| `{HookSettings.env_name(field)}` |" in hooks, f"{field}: the hooks read it, the page must say so"


def test_the_script_checks_the_committed_page(capsys) -> None:
    assert config_docs().main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {_anchor(match.group(1)) for match in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_every_link_between_the_pages_leads_to_a_file_and_a_heading_that_exist() -> None:
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            assert linked.exists(), f"{where}: no such file"
            if anchor:
                assert anchor in _headings(linked), f"{where}: no such heading"


def test_the_readme_stays_a_front_door_that_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES, "the reference belongs in docs/"
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"the README does not link docs/{page.name}"
