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
    done = subprocess.run([sys.executable, "-c", LIGHT_START], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, routing, credentials, loaded_at_end = json.loads(done.stdout.strip().splitlines()[-1])
    assert not loaded and not loaded_at_end, "the worker at rest does without litellm"
    assert routing is not None and routing == routing_problem("no-such-model-anywhere")
    if "DEEPSEEK_API_KEY" not in __import__("os").environ:
        assert credentials == credentials_problem(ModelChoice(model="deepseek/deepseek-chat", source="a test"))
        assert credentials is not None and "has no API key" in credentials
