"""litellm loaded at the first job, not at the worker's start: the start-up checks made in a child process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.environment import process_env
from tests.support.paths import ROOT
from worker.model.llm import credentials_problem, routing_problem
from worker.nanobot.config import ModelChoice

LIGHT_START = """
import json, sys
from worker.model import llm
from worker.nanobot.config import ModelChoice
from worker.service.build import build_deps
from worker.settings import Settings

llm.light_start()
build_deps(Settings())
loaded = "litellm" in sys.modules
routing = llm.model_problems(ModelChoice(model="no-such-model-anywhere"))[0]
credentials = llm.credentials_problem(ModelChoice(model="deepseek/deepseek-chat", source="a test"))
print(json.dumps([loaded, routing, credentials, "litellm" in sys.modules]))
"""


@pytest.mark.slow  # child interpreters that import litellm
def test_a_light_start_builds_and_checks_the_model_without_loading_litellm_and_says_the_same(nanobot_home) -> None:
    env = process_env(nanobot_home, "redis://127.0.0.1:1/0", config=True)
    env.pop("DEEPSEEK_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-c", LIGHT_START], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, routing, credentials, loaded_at_end = json.loads(done.stdout.strip().splitlines()[-1])
    assert not loaded and not loaded_at_end, "the worker at rest does without litellm"
    assert routing is not None and routing == routing_problem("no-such-model-anywhere")
    if "DEEPSEEK_API_KEY" not in __import__("os").environ:
        assert credentials == credentials_problem(ModelChoice(model="deepseek/deepseek-chat", source="a test"))
        assert credentials is not None and "has no API key" in credentials


def test_what_the_model_checks_depend_on_names_no_key_and_no_value() -> None:
    from worker.model.llm import check_asked

    choice = ModelChoice(
        model="openai/summarizer", api_key="sk-one", api_base="http://127.0.0.1:1/v1", provider="openai"
    )
    environ = {"OPENAI_API_KEY": "sk-env-one", "NANOBOT_SUMMARY_MODEL": "x", "HOME": "/home/a"}
    asked = check_asked(choice, environ)
    # Another key's value, another base URL, this project's or the machine's own variables: the same answers.
    assert (
        check_asked(
            ModelChoice(model="openai/summarizer", api_key="sk-two", api_base="http://other/v1", provider="openai"),
            environ,
        )
        == asked
    )
    assert check_asked(choice, {**environ, "OPENAI_API_KEY": "sk-env-two", "NANOBOT_X": "1", "HOME": "/b"}) == asked
    # Another model, provider, no key, no base URL, a provider's variable set or emptied: other answers.
    others = [
        check_asked(ModelChoice(model="openai/other", api_key="sk-one", api_base="b", provider="openai"), environ),
        check_asked(ModelChoice(model="openai/summarizer", api_key="sk-one", api_base="b"), environ),
        check_asked(
            ModelChoice(
                model="openai/summarizer", api_key="sk-one", api_base="b", provider="openai", source="nanobot config"
            ),
            environ,
        ),
        check_asked(ModelChoice(model="openai/summarizer", api_base="b", provider="openai"), environ),
        check_asked(ModelChoice(model="openai/summarizer", api_key="k", provider="openai"), environ),
        check_asked(choice, {**environ, "ANTHROPIC_API_KEY": "a"}),
        check_asked(choice, {**environ, "OPENAI_API_KEY": ""}),
    ]
    assert len({asked, *others}) == 1 + len(others)
    assert "sk-" not in asked


def test_a_start_after_the_first_reuses_its_model_checks_and_the_cache_holds_no_key(tmp_path, monkeypatch) -> None:
    from worker.model import llm

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-value")
    monkeypatch.setattr(llm, "_LIGHT", True)
    monkeypatch.setattr(llm, "_CHECKED", {})
    monkeypatch.delitem(sys.modules, "litellm", raising=False)
    monkeypatch.setattr(llm, "_litellm_module", None)
    asked_child: list[ModelChoice] = []

    def child(choice: ModelChoice) -> tuple[str | None, str | None]:
        asked_child.append(choice)
        return None, "no key for it (a test)"

    monkeypatch.setattr(llm, "_checked_in_child", child)
    choice = ModelChoice(model="openai/summarizer", api_key="sk-config-secret-value", provider="openai")
    assert llm.model_problems(choice) == (None, "no key for it (a test)")
    monkeypatch.setattr(llm, "_CHECKED", {})  # the next start of the worker
    assert llm.model_problems(choice) == (None, "no key for it (a test)")
    assert len(asked_child) == 1, "the second start asked no child"
    cached = tmp_path / "cache" / "nanobot-summary" / llm.CHECKS_CACHE
    assert "secret" not in cached.read_text(encoding="utf-8") and cached.stat().st_mode & 0o077 == 0
    monkeypatch.setattr(llm, "_CHECKED", {})
    llm.model_problems(ModelChoice(model="openai/another", provider="openai"))
    assert len(asked_child) == 2, "another model is checked anew"
