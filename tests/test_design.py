"""The design rules that imports and packaging must keep: one-way dependencies, and a base install that
puts only the hooks, all importable, into nanobot's environment."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from harness.nanobot_cli import find_nanobot, nanobot_python
from nanobot_hooks.contract.version import RELEASE
from tests.support.paths import HOOKS, ROOT

# What the worker may take from nanobot_hooks: the contract's modules, the text helpers both sides share, and the
# settings it extends.
WORKER_MAY_USE = {"nanobot_hooks.contract", "nanobot_hooks.text", "nanobot_hooks.settings"}
# The web page's recall search is the recall tool's own (read-only, standard library only), so a user sees what
# the assistant would find; no other worker module may use it.
WEB_MAY_ALSO_USE = {"nanobot_hooks.recall"}


def sources(folder: str) -> list[Path]:
    """The folder's modules (not the copies a local build of the hooks' folder leaves in its build/)."""
    return sorted(path for path in (ROOT / folder).rglob("*.py") if "build" not in path.relative_to(ROOT).parts)


def imports_of(folder: str) -> dict[str, set[str]]:
    """Module file -> every module it imports (absolute names, `from x import y` as x and x.y; the command line's
    handlers, imported as they run, by the name given to `_lazy`)."""
    found: dict[str, set[str]] = {}
    for path in sources(folder):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "_lazy"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
        found[str(path.relative_to(ROOT))] = names
    return found


def test_every_import_is_absolute_so_the_layer_checks_see_it() -> None:
    for folder in ("worker", "nanobot_hooks", "tests"):
        for path in sources(folder):
            relative = [
                node.lineno
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) and node.level > 0
            ]
            assert not relative, f"{path.relative_to(ROOT)}: relative import on line(s) {relative}"


def test_the_hooks_import_neither_the_worker_nor_litellm_nor_the_scripts() -> None:
    for module, names in imports_of("nanobot_hooks").items():
        bad = {
            n
            for n in names
            if n.split(".")[0] in {"worker", "litellm", "scripts", "bench", "harness", "tests", "tiktoken"}
        }
        assert not bad, f"{module} imports {sorted(bad)}"


def test_no_hooks_module_names_the_worker_even_as_a_string() -> None:
    """The hooks' distribution holds no command line: nothing in it reaches for the worker, even at run time."""
    for module in imports_of("nanobot_hooks"):
        assert '"worker' not in (ROOT / module).read_text(encoding="utf-8"), module


def test_the_worker_uses_only_the_contract_and_the_settings_of_the_hooks() -> None:
    for module, names in imports_of("worker").items():
        hooks = {n for n in names if n.startswith("nanobot_hooks")}
        # `from nanobot_hooks.contract.keys import Keys` adds both the module and Keys: the units are checked.
        units = {".".join(n.split(".")[:2]) for n in hooks}
        allowed = WORKER_MAY_USE | (WEB_MAY_ALSO_USE if module.startswith("worker/web/") else set())
        assert units <= allowed, f"{module} uses {sorted(units - allowed)}"
        upward = {n for n in names if n.split(".")[0] in {"scripts", "bench", "harness", "tests"}}
        assert not upward, f"{module} imports {sorted(upward)}"


# What the contract exports, module by module, pinned (as httpx pins its public names): a change here is a change of
# the contract between two processes that may run different versions for a while, so it is made on purpose.
CONTRACT = {
    "keys": [
        "JOB_DAILY",
        "JOB_IDLE",
        "JOB_SUMMARIZE",
        "KEY_PREFIX",
        "NAMESPACE_FROM_ID",
        "NAMESPACE_PATTERN",
        "WORKSPACE_ID_FILE",
        "Keys",
        "default_namespace",
    ],
    "records": ["RECORD_KEY_FILE", "Reason", "SummarizeRequest", "SummaryRecord", "record_key", "utcnow"],
    "queue": [
        "CONTEXT_DAYS",
        "CONTEXT_KEPT",
        "RECORD_SECONDS",
        "REPLICA_WAIT_MS",
        "DAMAGED",
        "UNREADABLE",
        "context_history",
        "drop_record",
        "enqueue_idle_check",
        "enqueue_summary",
        "load_record",
        "load_waiting_record",
        "read_waiting_record",
        "read_waiting_records",
        "note_context",
        "pending_sessions",
        "reply",
        "store_record",
    ],
    "redis_url": ["SENTINEL_SCHEME", "SentinelTarget", "redacted_url", "sentinel_target"],
    "client": ["UNREAD_JOB", "close_client", "close_sentinels", "open_client", "sync_client"],
    "session_format": [
        "INTERNAL_SESSION_PREFIXES",
        "LAST_SUMMARY",
        "LAST_USAGE",
        "METADATA_TYPE",
        "NOT_A_TURN_FLAGS",
        "NOTED_SUFFIX",
        "PROVIDER_STATE_TYPE",
        "RETIRED_FOLDER",
        "SESSION_FILES_LOCK",
        "SESSION_SUFFIX",
        "channel_of",
        "content_text",
        "is_direct_chat",
        "is_hidden",
        "is_internal_session",
        "is_user_turn",
        "key_from_name",
        "last_context_tokens",
        "retired_key",
        "retired_name",
        "storage_name",
        "summary_text",
        "timestamp_before",
        "tool_calls",
    ],
    "marker": ["METADATA_KEY", "AppliedMark", "SessionMarker"],
    "recall": [
        "BLOCK_BYTES",
        "NOTE_LINE_BITS",
        "PAGE_BYTES",
        "RECALL_INDEX",
        "RECALL_SCHEMA_VERSION",
        "RECALL_TABLES",
        "RETIRED_SOURCE",
        "SOURCE_BITS",
        "Block",
        "Directory",
        "directory",
        "fts_problem",
        "index_text",
        "length",
        "lengths",
        "pack",
        "Passage",
        "read_block",
        "retired_source",
        "source_owner",
        "unpack",
        "VECTORS_TABLE",
        "quantize",
        "similarity",
    ],
    "version": [
        "BEFORE_CONTRACT",
        "CONTRACT",
        "CONTRACT_FIELD",
        "HOOKS_INSTALL",
        "Mismatch",
        "RELEASE",
        "RELEASE_FIELD",
        "release_order",
        "version_mismatch",
        "versions_of",
    ],
}
# The text helpers beside it (nanobot_hooks.text), pinned the same way.
TEXT = ["CJK_LETTERS", "CJK_RUN", "HAN", "HANGUL", "KANA", "cjk_grams"]


def test_each_contract_module_exports_exactly_its_pinned_names() -> None:
    import importlib

    modules = {path.stem for path in (HOOKS / "contract").glob("*.py")} - {"__init__"}
    assert modules == set(CONTRACT), "a contract module was added or removed: pin its names in CONTRACT"
    for module, names in {**{f"contract.{m}": n for m, n in CONTRACT.items()}, "text": TEXT}.items():
        source = importlib.import_module(f"nanobot_hooks.{module}")
        assert sorted(source.__all__) == sorted(names), f"nanobot_hooks.{module}.__all__ is not the pinned list"
        assert all(hasattr(source, name) for name in names), module


def test_the_contract_package_exports_nothing_so_its_modules_load_only_when_used() -> None:
    tree = ast.parse((HOOKS / "contract" / "__init__.py").read_text(encoding="utf-8"))
    assert [type(node) for node in tree.body] == [ast.Expr], "the package's __init__ holds more than its docstring"


def test_the_worker_takes_from_the_contract_only_what_its_modules_export() -> None:
    """A contract module's names outside its `__all__` are its own business, free to change in any release."""
    exported = {f"nanobot_hooks.contract.{m}": set(n) for m, n in CONTRACT.items()} | {"nanobot_hooks.text": set(TEXT)}
    for path in sources("worker"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith("nanobot_hooks.contract")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("nanobot_hooks.contract", "nanobot_hooks.text")
            ):
                bad = [a.name for a in node.names if a.name not in exported.get(node.module or "", set())]
            else:
                continue
            assert not bad, f"{path.relative_to(ROOT)}:{node.lineno} takes {bad} from {getattr(node, 'module', '')}"


# The worker's layers, lowest first: a unit (a package of worker/, or a module at its top) imports only
# from lower layers, so a reader can take the code from the bottom up and a change low down names who
# can be affected. The data goes text -> model -> memory and state -> the jobs; the entry points sit on top.
WORKER_LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"errors", "files", "connections", "keep_rule"}),
    ("text", {"text"}),
    ("nanobot's files", {"nanobot"}),
    ("memory's entries and files", {"memory"}),
    ("the model", {"model"}),
    ("the jobs' state in Redis", {"state"}),
    ("settings", {"settings"}),
    ("the jobs", {"summarize"}),
    # The entry points, each above what it starts: arq's worker service; the web page; the command line, which runs
    # the one and starts the other (at run time); arq's entry and `python -m worker`, which take them from there.
    ("the worker service", {"service"}),
    ("the web page", {"web"}),
    ("the command line", {"commands"}),
    ("entry points", {"app", "__main__", "__init__"}),
]


# The hooks' layers, lowest first: the contract and nanobot's format at the bottom, the pure decisions, the
# Redis side, the two jobs done inside a turn, and the entries nanobot loads on top.
HOOKS_LAYERS: list[tuple[str, set[str]]] = [
    ("the text helpers both sides share", {"text"}),
    ("the contract", {"contract", "logs", "__init__"}),
    ("nanobot's internals, every touch of them", {"surface"}),
    ("settings", {"settings"}),
    ("recall: its query, hits, ranking, snippets, search and tool", {"recall"}),
    ("the Redis link", {"link"}),
    ("what the parts share", {"context"}),
    ("the turn's path: trigger, listener, pickup", {"turn"}),
    ("the integration", {"integration"}),
    ("nanobot's entry points", {"plugin"}),
]


def unit_of(module: str) -> str:
    """worker/summarize/jobs.py or worker.summarize.jobs -> summarize; worker/app.py -> app."""
    parts = module.removesuffix(".py").replace("/", ".").split(".")
    return parts[1]


def check_layers(package: str, layers: list[tuple[str, set[str]]]) -> None:
    layer = {unit: n for n, (_, units) in enumerate(layers) for unit in units}
    for module, names in imports_of(package).items():
        here = unit_of(module)
        assert here in layer, f"{module}: {here} is in no layer"
        for name in {n for n in names if n.startswith(package + ".")}:
            there = unit_of(name)
            if there == here:
                continue
            assert there in layer, f"{module} imports {name}, in no layer"
            assert layer[there] < layer[here], (
                f"{module} ({layers[layer[here]][0]}) imports {name} ({layers[layer[there]][0]})"
            )


def test_the_worker_imports_only_from_lower_layers() -> None:
    check_layers("worker", WORKER_LAYERS)


def test_the_hooks_import_only_from_lower_layers() -> None:
    check_layers("nanobot_hooks", HOOKS_LAYERS)


def test_the_pure_cut_planner_imports_no_worker_module_but_the_keep_rule() -> None:
    found = imports_of("worker")
    for module, allowed in (("worker/summarize/cut.py", {"worker.keep_rule"}), ("worker/keep_rule.py", set())):
        names = found[module]
        assert {n for n in names if n.startswith("worker") and not any(n.startswith(a) for a in allowed)} == set(), (
            sorted(names)
        )
        assert not {n for n in names if n.split(".")[0] in {"pydantic", "pydantic_settings", "litellm", "redis", "arq"}}


@pytest.fixture
def wheel(project_wheels: Path) -> Path:
    """The hooks' wheel (nanobot_hooks/pyproject.toml), what nanobot's environment gets: built once per run
    (tests/support/built.py)."""
    (path,) = project_wheels.glob("nanobot_summary_hooks-*.whl")
    return path


@pytest.mark.slow  # a package build
def test_the_hooks_wheel_holds_only_the_hooks(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"nanobot_hooks"}, sorted(tops)
    # Every module of the folder (its subpackages are named one by one in its pyproject.toml), and nothing else:
    # not the pyproject.toml beside them, which `hooks install` takes as the mark of a checkout.
    modules = {f"nanobot_hooks/{path.relative_to(HOOKS).as_posix()}" for path in sources("nanobot_hooks")}
    assert {name for name in names if name.startswith("nanobot_hooks/")} == modules
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "nanobot_hooks.plugin:SummaryWorkerHooks" in declared and "nanobot_hooks.recall.tool:RecallTool" in declared
    assert "console_scripts" not in declared, "the hooks have no command line: the worker's wheel has it"
    assert wheel.name.startswith(f"nanobot_summary_hooks-{RELEASE}-"), wheel.name


@pytest.mark.slow  # a package build
def test_the_worker_wheel_holds_the_worker_its_files_and_the_command(project_wheels: Path) -> None:
    (wheel,) = project_wheels.glob("nanobot_summary_worker-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert {n.split("/")[0] for n in names if ".dist-info" not in n} == {"worker"}, "no hooks, tests or harness"
    for packaged in ("worker/web/templates/base.html", "worker/web/static/style.css", "worker/text/languages.toml"):
        assert packaged in names, packaged
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Requires-Dist: nanobot-summary-hooks=={RELEASE}" in metadata, "the hooks of the same version"
    declared = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "nanobot-summary = worker.commands.cli:main" in declared


def test_the_worker_and_the_hooks_have_the_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == RELEASE, "pyproject.toml's version is nanobot_hooks/contract/version.py's"
    assert f"nanobot-summary-hooks=={RELEASE}" in project["dependencies"]
    assert f"## {RELEASE}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), "CHANGELOG.md says what changed"


@pytest.mark.slow  # a package build
def test_every_module_of_the_base_install_imports_in_nanobots_environment(wheel: Path, tmp_path: Path) -> None:
    zipfile.ZipFile(wheel).extractall(tmp_path)
    modules = sorted(
        ".".join(p.relative_to(tmp_path).with_suffix("").parts) for p in (tmp_path / "nanobot_hooks").rglob("*.py")
    )
    assert "nanobot_hooks.plugin" in modules
    python = nanobot_python(find_nanobot())
    probe = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint('ok')"
    result = subprocess.run(
        [str(python), "-c", probe, *modules],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


# Where the tests live: mirroring the packages (tests/worker/<package>/, tests/hooks/<package>/), the shared harness
# and the benchmarks beside theirs, scenarios across the whole (end to end, faults, security, the first hour), and
# at the top only the tests of the project as a whole (this design, the docs, the README's examples).
TEST_HOMES = {"tests/worker": ROOT / "worker", "tests/hooks": HOOKS}
TOP_LEVEL_TESTS = {"test_design.py", "test_docs.py", "test_readme.py"}


def test_the_tests_mirror_the_packages() -> None:
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT / "tests")
        folder = str(relative.parent)
        assert (path.parent / "__init__.py").exists(), f"{relative}: its folder is no package"
        if folder == ".":
            assert relative.name in TOP_LEVEL_TESTS, f"{relative} belongs in a folder that mirrors what it tests"
            continue
        top, *inner = relative.parent.parts
        assert top in {"worker", "hooks", "harness", "bench", "scenarios"}, relative
        if top in {"worker", "hooks"}:
            mirrored = TEST_HOMES[f"tests/{top}"].joinpath(*inner)
            assert mirrored.is_dir(), f"{relative}: {mirrored.relative_to(ROOT)} is no package of the code"


# The bar every function is held to, the benchmarks' and the harness's too: a reader takes one in at a glance.
# Counted in statements (the lines one starts on), so that `ruff format`'s breaks inside a long call or signature do
# not count: 35 is what 40 physical lines held before the formatter.
MAX_FUNCTION_STATEMENTS = 35


def test_no_function_is_over_thirty_five_statements() -> None:
    long = []
    for folder in ("worker", "nanobot_hooks", "bench", "harness"):
        for path in sources(folder):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    starts = {
                        inner.lineno for inner in ast.walk(node) if isinstance(inner, ast.stmt) and inner is not node
                    }
                    if len(starts) > MAX_FUNCTION_STATEMENTS:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({len(starts)} statements)")
    assert not long, long


# A pytest plugin that prints the timeout mark of every collected test that uses a fixture built once per run.
_TIMEOUT_PROBE = """
import json


def pytest_collection_finish(session):
    from tests.support.built import BUILT_ONCE  # once pytest has loaded it as the plugin it is

    for item in session.items:
        if BUILT_ONCE & set(getattr(item, "fixturenames", ())):
            mark = item.get_closest_marker("timeout")
            print("TIMEOUT", json.dumps([item.nodeid, list(mark.args), dict(mark.kwargs)] if mark else [item.nodeid]))
"""


def test_a_test_that_waits_for_a_shared_build_keeps_its_slow_timeout(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A test whose fixture builds once per run (tests/support/built.py) is bounded by its slow timeout for its own
    calls: the build's mark once replaced that timeout with the 60 s default, and a package test under load timed out
    in a minute. Read from this run's collection where it holds the package tests, else from a collection of them in
    a process of its own."""
    from tests.conftest import SLOW_TIMEOUT
    from tests.support.built import BUILT_ONCE

    modules = ("tests/scenarios/test_packaging.py", "tests/scenarios/test_docker.py")
    items = [item for item in request.session.items if item.nodeid.startswith(modules)]
    if items:
        marks = []
        for item in items:
            if BUILT_ONCE & set(getattr(item, "fixturenames", ())):
                mark = item.get_closest_marker("timeout")
                marks.append([item.nodeid, list(mark.args), dict(mark.kwargs)] if mark else [item.nodeid])
        shown = "\n".join(json.dumps(mark) for mark in marks)
    else:
        (tmp_path / "timeout_probe.py").write_text(_TIMEOUT_PROBE, encoding="utf-8")
        argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
        done = subprocess.run(
            [*argv, "-p", "timeout_probe", *modules],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        lines = done.stdout.splitlines()
        marks = [json.loads(line.removeprefix("TIMEOUT ")) for line in lines if line.startswith("TIMEOUT ")]
        shown = done.stdout[-3000:]
    assert len(marks) >= 5, shown
    for nodeid, *mark in marks:
        assert mark, f"{nodeid}: no timeout"
        args, kwargs = mark
        assert kwargs.get("func_only") and args and args[0] >= SLOW_TIMEOUT, (nodeid, args, kwargs)
