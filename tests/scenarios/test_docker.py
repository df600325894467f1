"""nanobot in Docker (deploy/docker-compose.nanobot.yml, deploy/nanobot/Dockerfile) and the worker's image
(deploy/worker/Dockerfile): the compose file's structure (one network, nanobot's folder at one path, one user, one
zone, nothing published beyond loopback), both images' wheels built and installed as their steps say (nanobot's
gets the hooks' wheel only, run with pip's resolver against nanobot-ai 0.3.5; the worker's both wheels), and
nanobot's and the worker's own code run under the environments the compose file gives them. No Docker engine runs
here: no image is built, no container started (the docs say so)."""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.environment import process_env
from harness.nanobot_cli import find_nanobot, nanobot_python
from harness.redis_server import free_port
from tests.support.built import InstalledWorker, once_per_run
from tests.support.dockerfile import run_with, steps
from tests.support.paths import HOOKS, ROOT

DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.nanobot.yml"
DOCKERFILE = DEPLOY / "nanobot" / "Dockerfile"
DOCKERIGNORE = DEPLOY / "nanobot" / "Dockerfile.dockerignore"
WORKER_DOCKERFILE = DEPLOY / "worker" / "Dockerfile"
# nanobot's image: its user (`useradd -m -u 1000 ... nanobot` in nanobot's Dockerfile), home and data folder.
NANOBOT_UID = "1000"
IMAGE_HOME = "/home/nanobot"
DATA = f"{IMAGE_HOME}/.nanobot"
NANOBOT_SERVICES = ("nanobot-gateway", "nanobot-cli")
# The services that read or write nanobot's folder: nanobot's own processes and the worker.
SHARING = (*NANOBOT_SERVICES, "worker")
THIS = "nanobot-summary-hooks"


# --- reading the files as compose and docker do -----------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


class Unset(Exception):
    """A `${NAME:?message}` with NAME unset: compose refuses the file with the message."""


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?message}` and `$$`, on strings."""
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, colon, kind, rest = match.group(1), match.group(2), match.group(3), match.group(4)
        current = variables.get(name)
        if current is None or (colon and current == ""):
            if kind == "-":
                return rest
            raise Unset(f"{name}: {rest}" if kind == "?" else f"{name} is not set and has no default")
        return current

    value = re.sub(r"(?<!\$)\$\{(\w+)(?:(:?)([-?])([^}]*))?\}", one, value)
    return value.replace("$$", "$")


def resolved(variables: dict[str, str]) -> dict[str, Any]:
    """Every string of the file interpolated, as `docker compose config` would show it (less path resolving)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return interpolate(node, variables)

    return walk(compose())


def service_env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: "" if value is None else str(value) for key, value in environment.items()}


def binds(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of the service's volumes (short syntax), read-only marks dropped."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        mounts[target] = source
    return mounts


def env_file(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def dockerfile(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    return steps(path)


def build_args() -> dict[str, str]:
    """The defaults of the ARGs declared before FROM."""
    args = {}
    for keyword, rest in dockerfile():
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def stages(path: Path = DOCKERFILE) -> list[list[tuple[str, str]]]:
    """The Dockerfile's steps, one list per FROM (each starting with its FROM)."""
    found: list[list[tuple[str, str]]] = []
    for step in dockerfile(path):
        if step[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(step)
    return found


def copied(path: Path = DOCKERFILE) -> list[str]:
    """The build-context paths the Dockerfile COPYs (sources of every COPY without --from)."""
    sources = []
    for keyword, rest in dockerfile(path):
        if keyword == "COPY":
            words = shlex.split(rest)
            if not any(w.startswith("--from") for w in words):
                sources += [w for w in words if not w.startswith("--")][:-1]
    return sources


def install_script() -> str:
    """The one RUN that runs pip install (in nanobot's image)."""
    return run_with(DOCKERFILE, "pip install")


def image_wheels(path: Path, context: Path, out: Path) -> list[Path]:
    """The first stage's `pip wheel` as written, its /src the copied context, its /wheels `out`."""
    script = run_with(path, "pip wheel").replace("/src", str(context)).replace("/wheels", str(out))
    done = subprocess.run(
        ["sh", "-ec", script.replace("python -m pip", f"{sys.executable} -m pip")],
        capture_output=True,
        text=True,
        timeout=600,
        env=process_env(test_defaults=False),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return sorted(out.glob("*.whl"))


def pattern_regex(pattern: str) -> str:
    """A .dockerignore pattern as a regex: `*` and `?` within one path element, `**/` any folders above."""
    out, rest = "", pattern
    while rest:
        if rest.startswith("**/"):
            out, rest = out + "(.*/)?", rest[3:]
        elif rest[0] == "*":
            out, rest = out + "[^/]*", rest[1:]
        elif rest[0] == "?":
            out, rest = out + "[^/]", rest[1:]
        else:
            out, rest = out + re.escape(rest[0]), rest[1:]
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or a folder above it decides; `!` lets it in."""
    parts = path.split("/")
    verdict = False
    for pattern in patterns:
        regex = pattern_regex(pattern.removeprefix("!"))
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            verdict = not pattern.startswith("!")
    return verdict


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def hooks_pyproject() -> dict[str, Any]:
    return tomllib.loads((HOOKS / "pyproject.toml").read_text(encoding="utf-8"))


VARIABLES = {"TZ": "Europe/Berlin"}


# --- the compose file ---------------------------------------------------------------------------------------------


def test_nanobot_the_worker_and_redis_share_one_network_and_nanobot_reaches_redis_by_name() -> None:
    spec = resolved(VARIABLES)
    services = spec["services"]
    assert {"redis", "worker", *NANOBOT_SERVICES} == set(services)
    assert list(spec["networks"]) == ["nanobot"]
    for name, service in services.items():
        assert service["networks"] == ["nanobot"], name
        assert "network_mode" not in service, name
    urls = {name: service_env(services[name])["REDIS_URL"] for name in SHARING}
    assert set(urls.values()) == {"redis://redis:6379/0"}, urls
    gateway = services["nanobot-gateway"]
    assert gateway["command"] == ["gateway"]
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["worker"]["depends_on"]["redis"]["condition"] == "service_healthy"
    # The hooks' settings come from the same file as the worker's (REDIS_URL there is overridden above).
    assert {services[name]["env_file"] for name in SHARING} == {"worker.env"}
    assert (DEPLOY / "worker.env.example").exists()
    assert services["nanobot-cli"]["profiles"] == ["cli"], "the command line starts only when asked for"


def test_nothing_is_published_beyond_loopback() -> None:
    services = resolved(VARIABLES)["services"]
    assert "ports" not in services["redis"] and "expose" not in services["redis"], "Redis is reached by name only"
    published = 0
    for name, service in services.items():
        for port in service.get("ports", []):
            assert isinstance(port, str), f"{name}: long port syntax would need its host_ip checked"
            host_ip, host_port, container_port = port.split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes {port}"
            published += 1
    assert published == 2, "nanobot's health endpoint and its web chat"
    gateway_ports = [port.split(":")[2] for port in services["nanobot-gateway"]["ports"]]
    assert gateway_ports == ["18790", "8765"], "the ports nanobot's image exposes"


def test_nanobots_folder_is_shared_at_one_path_by_one_user() -> None:
    services = resolved({**VARIABLES, "NANOBOT_DIR": "/srv/nanobot"})["services"]
    for name in SHARING:
        assert binds(services[name])[DATA] == "/srv/nanobot", name
        assert service_env(services[name])["HOME"] == IMAGE_HOME, f"{name}: `~/.nanobot` in nanobot's config"
        assert services[name]["user"] == f"{NANOBOT_UID}:{NANOBOT_UID}", f"{name}: nanobot's image user"
    worker = services["worker"]
    assert service_env(worker)["NANOBOT_CONFIG"] == f"{DATA}/config.json", "nanobot's own config path"
    # Without NANOBOT_DIR: the folder nanobot's own compose file mounts.
    default = resolved(VARIABLES)["services"]
    assert {binds(default[name])[DATA] for name in SHARING} == {"~/.nanobot"}
    # Another owner: one variable moves every service, so they never differ.
    other = resolved({**VARIABLES, "NANOBOT_UID": "1001", "NANOBOT_GID": "1002"})["services"]
    assert {other[name]["user"] for name in SHARING} == {"1001:1002"}


def test_one_timezone_for_nanobot_and_the_worker_and_none_is_refused() -> None:
    for zone in ("Asia/Shanghai", "America/Chicago"):
        services = resolved({"TZ": zone})["services"]
        assert {service_env(services[name]).get("TZ") for name in SHARING} == {zone}
    with pytest.raises(Unset, match="TZ"):
        resolved({})  # a container's zone would be UTC: compose stops with the message instead
    assert all("/etc/localtime" not in binds(compose()["services"][name]) for name in SHARING), (
        "TZ alone decides: a host zone file in one container only would split them again"
    )


def test_the_worker_runs_as_in_the_tested_compose_file_and_redis_persists_as_there() -> None:
    services = compose()["services"]  # as written: both files are interpolated alike
    tested = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    worker = services["worker"]
    for key in ("build", "image", "command", "healthcheck", "stop_grace_period", "init", "restart"):
        assert worker[key] == tested["worker"][key], key
    assert (DEPLOY / worker["build"]["context"] / worker["build"]["dockerfile"]).resolve() == WORKER_DOCKERFILE
    assert not [source for source in binds(worker).values() if source.startswith("..")], "no checkout mounted"
    assert "VENV" not in service_env(worker), "the image's own environment, installed at its build"
    for key in ("command", "healthcheck", "restart", "image"):
        assert services["redis"][key] == tested["redis"][key], key
    assert binds(services["redis"])["/data"] in compose()["volumes"], "Redis's files in a named volume"


def test_nanobots_containers_build_the_derived_image_at_one_tag() -> None:
    services = resolved(VARIABLES)["services"]
    builds = {name: services[name]["build"] for name in NANOBOT_SERVICES}
    for name, build in builds.items():
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
        assert build["args"] == {
            "NANOBOT_IMAGE": build_args()["NANOBOT_IMAGE"],
            "NANOBOT_VERSION": build_args()["NANOBOT_VERSION"],
        }, "the Dockerfile's defaults"
    assert len({services[name]["image"] for name in NANOBOT_SERVICES}) == 1
    for name in NANOBOT_SERVICES:
        assert services[name]["cap_drop"] == ["ALL"] and "cap_add" not in services[name]
        assert services[name]["security_opt"] == ["no-new-privileges:true"]


# --- the Dockerfile -------------------------------------------------------------------------------------------


def test_the_dockerfile_starts_from_nanobots_image_in_the_tested_range() -> None:
    args = build_args()
    assert args["NANOBOT_IMAGE"] == "nanobot", "the name nanobot's docs build its image under"
    froms = [rest for keyword, rest in dockerfile() if keyword == "FROM"]
    # The hooks' wheel built in a plain Python image; the image made is nanobot's, with that wheel copied in.
    assert froms == ["${PYTHON_IMAGE} AS wheel", "${NANOBOT_IMAGE}:${NANOBOT_VERSION}"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim", args["PYTHON_IMAGE"]), "a Python the hooks support"
    last = stages()[-1]
    assert [rest for keyword, rest in last if keyword == "COPY"] == [
        "--from=wheel --chown=nanobot:nanobot /wheels /tmp/nanobot-summary-hooks"
    ], "the wheel only, nothing else"
    tested = next(Requirement(r) for r in pyproject()["project"]["optional-dependencies"]["nanobot"])
    assert tested.name == "nanobot-ai" and tested.specifier.contains(args["NANOBOT_VERSION"]), (
        f"{args['NANOBOT_VERSION']} is outside the tested {tested}"
    )


def test_the_dockerfile_keeps_nanobots_user_and_sets_nothing_secret() -> None:
    steps = dockerfile()
    users = [(index, rest) for index, (keyword, rest) in enumerate(steps) if keyword == "USER"]
    pip = next(index for index, (keyword, rest) in enumerate(steps) if keyword == "RUN" and "pip install" in rest)
    before = [rest for index, rest in users if index < pip]
    assert before and before[-1] == "nanobot", "pip runs as the owner of nanobot's virtualenv"
    assert users[-1][1] == "root", "nanobot's image starts as root (its entrypoint drops to nanobot)"
    assert not [s for s in steps if s[0] in ("ENV", "ENTRYPOINT", "CMD", "EXPOSE", "VOLUME", "WORKDIR")], (
        "nanobot's own start, paths and ports are left as its image has them"
    )
    for keyword, rest in steps:
        assert not re.search(r"key|token|secret|password", rest, re.IGNORECASE), (keyword, rest)


def test_the_image_installs_the_base_package_only_from_the_files_the_context_lets_in() -> None:
    script = install_script()
    found = re.search(r"pip install ([^&]*)", script)
    assert found, script
    install = found.group(1).split()
    target = install[-1]
    assert target == "/tmp/nanobot-summary-hooks/nanobot_summary_hooks-*.whl", "the hooks' wheel, no other"
    assert "[" not in target and "-e" not in install and "--editable" not in install, "the base package only"
    assert "--no-deps" in run_with(DOCKERFILE, "pip wheel").split(), "the hooks' wheel alone, no dependency built"
    assert install[install.index("--constraint") + 1] in script.split("pip install")[0], (
        "the constraint is the image's own package list, written before the install"
    )
    sources = copied()
    assert set(sources) == {"nanobot_hooks"}, "the hooks' folder: their package and its pyproject.toml"
    project = hooks_pyproject()
    assert "readme" not in project["project"], "setuptools would read a readme the context leaves out"
    setuptools = project["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"nanobot_hooks": "."}, "the folder is the package"
    for package in setuptools["packages"]:  # each subpackage's folder inside the copied one
        assert (HOOKS.joinpath(*package.split(".")[1:]) / "__init__.py").exists(), package
    patterns = ignore_patterns()
    for source in (
        *sources,
        "nanobot_hooks/pyproject.toml",
        "nanobot_hooks/plugin.py",
        "nanobot_hooks/contract/keys.py",
    ):
        assert not ignored(source, patterns), f"{source} must reach the build"
    for other in (
        ".venv/bin/python",
        ".venv-nanobot",
        "worker/app.py",
        "tests/scenarios/test_docker.py",
        ".git/HEAD",
        "deploy/worker.env",
        "nanobot_hooks/__pycache__/plugin.cpython-312.pyc",
        "build/lib/x.py",
        "nanobot_hooks/build/lib/nanobot_hooks/plugin.py",
        "nanobot_hooks/nanobot_summary_hooks.egg-info",
    ):
        assert ignored(other, patterns), f"{other} stays out of the build context"


def copy_build_context(folder: Path, dockerfile_path: Path = DOCKERFILE) -> Path:
    """What the Dockerfile's COPYs put in the image, copied from this checkout."""
    folder.mkdir()
    for source in copied(dockerfile_path):
        path = ROOT / source
        if path.is_dir():
            # What the .dockerignore files keep out: caches, and a local build's build/ and egg-info.
            shutil.copytree(
                path, folder / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
            )
        else:
            (folder / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, folder / source)
    return folder


@pytest.fixture
def nanobot_image_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the wheel nanobot's image's first stage builds as written (its COPYs, its `pip wheel`), built
    once per run for the tests of the image's install."""

    def make(folder: Path) -> None:
        image_wheels(DOCKERFILE, copy_build_context(folder / "src"), folder / "wheels")

    return once_per_run(tmp_path_factory, "nanobot-image-wheels", make) / "wheels"


def installed(python: Path) -> dict[str, str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, timeout=120, check=True
    )
    return {canonicalize_name(item["name"]): item["version"] for item in json.loads(listing.stdout)}


def test_the_images_install_step_changes_none_of_nanobots_packages(nanobot_image_wheels: Path, tmp_path: Path) -> None:
    """The RUN as written, in nanobot's environment (nanobot-ai 0.3.5), with pip's resolver (`--dry-run
    --report`: a fresh venv with nanobot-ai takes pip a minute here, too long for one test)."""
    python = nanobot_python(find_nanobot())
    before = installed(python)
    assert before.get("nanobot-ai", "").startswith("0.3."), "nanobot's environment holds nanobot-ai 0.3"
    # A copy of the shared wheel's folder: the step removes it once installed.
    report, wheels = tmp_path / "report.json", shutil.copytree(nanobot_image_wheels, tmp_path / "wheels")
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith("nanobot_summary_hooks-"), wheel
    script = install_script()
    assert "/tmp/nanobot-summary-hooks" in script and "/tmp/nanobot-packages.txt" in script
    script = (
        script.replace("/tmp/nanobot-summary-hooks", str(wheels))
        .replace("/tmp/nanobot-packages.txt", str(tmp_path / "packages.txt"))
        .replace("pip install", f"pip install --dry-run --quiet --report {report}")
    )
    # `python` is nanobot's, first on PATH as in its image (/app/.venv/bin).
    env = {**process_env(test_defaults=False), "PATH": f"{python.parent}:{os.environ['PATH']}"}
    run = subprocess.run(["sh", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    chosen = {canonicalize_name(item["metadata"]["name"]): item for item in json.loads(report.read_text())["install"]}
    ours = chosen.pop(canonicalize_name(THIS))
    assert ours["requested"] and not ours.get("requested_extras"), "the base package, no extras"
    assert ours["download_info"]["url"] == wheel.as_uri(), "the wheel the first stage built"
    changed = {name: (before[name], item["metadata"]["version"]) for name, item in chosen.items() if name in before}
    assert changed == {}, f"the install would replace nanobot's packages: {changed}"
    assert installed(python) == before, "a dry run changes nothing"


def test_the_built_package_gives_nanobot_its_tools_through_its_own_loader(
    nanobot_image_wheels: Path, tmp_path: Path
) -> None:
    """The wheel built from the image's COPYs (not this checkout's editable install), found by nanobot 0.3.5's own
    plugin discovery: the entry points are registered and each loads its Tool."""
    python = nanobot_python(find_nanobot())
    site = tmp_path / "site"
    (wheel,) = nanobot_image_wheels.glob("*.whl")
    build = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=process_env(test_defaults=False),
    )
    assert build.returncode == 0, build.stderr[-3000:]
    probe = (
        "import json, sys, nanobot_hooks\n"
        "from nanobot.agent.tools.loader import ToolLoader\n"
        "plugins = ToolLoader()._discover_plugins()\n"
        "print(json.dumps({'package': nanobot_hooks.__file__, 'plugins': {name: [cls.__module__ + ':' + "
        "cls.__qualname__, sys.modules[cls.__module__].__file__] for name, cls in plugins.items()}}))\n"
    )
    # The built copy first on the path, ahead of the editable install scripts/test made.
    env = {**process_env(test_defaults=False), "PYTHONPATH": str(site)}
    run = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(site)
    entry_points = hooks_pyproject()["project"]["entry-points"]["nanobot.tools"]
    assert {name: where for name, (where, _) in found["plugins"].items()} == entry_points
    assert all(Path(path).is_relative_to(site) for _, path in found["plugins"].values())


# --- the worker's image ---------------------------------------------------------------------------------------


def test_the_worker_image_installs_the_wheels_built_from_the_files_its_context_lets_in() -> None:
    """Two stages: both wheels built from the context's files, then the worker's wheel installed from them alone
    (no checkout, no build tools in the image), its command what both compose files run, not as root."""
    first, last = stages(WORKER_DOCKERFILE)
    assert first[0] == ("FROM", "${PYTHON_IMAGE} AS wheels") and last[0] == ("FROM", "${PYTHON_IMAGE}")
    wheel = run_with(WORKER_DOCKERFILE, "pip wheel").split()
    assert "--no-deps" in wheel and wheel[-2:] == ["/src/nanobot_hooks", "/src"], "the hooks' wheel and the worker's"
    assert [rest for keyword, rest in last if keyword == "COPY"] == ["--from=wheels /wheels /tmp/wheels"]
    install = run_with(WORKER_DOCKERFILE, "pip install")
    assert "--find-links /tmp/wheels /tmp/wheels/nanobot_summary_worker-*.whl" in install, install
    assert "rm -rf /tmp/wheels" in install
    users = [rest for keyword, rest in last if keyword == "USER"]
    assert users and not users[-1].startswith(("root", "0")), "the image runs as no root"
    (cmd,) = [json.loads(rest) for keyword, rest in last if keyword == "CMD"]
    for name in ("docker-compose.yml", "docker-compose.nanobot.yml"):
        worker = yaml.safe_load((DEPLOY / name).read_text(encoding="utf-8"))["services"]["worker"]
        assert worker["command"] == cmd, name
        assert worker["image"] == f"nanobot-summary-worker:{pyproject()['project']['version']}", name
    env = [rest for keyword, rest in last if keyword == "ENV"]
    assert any("PATH=/opt/nanobot-summary/bin:$PATH" in rest for rest in env), "its arq for the health check"
    for keyword, rest in dockerfile(WORKER_DOCKERFILE):
        assert not re.search(r"key|token|secret|password", rest, re.IGNORECASE), (keyword, rest)

    sources = copied(WORKER_DOCKERFILE)
    assert set(sources) == {"pyproject.toml", "README.md", "worker", "nanobot_hooks"}
    lines = (WORKER_DOCKERFILE.parent / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    package_files = [
        path.relative_to(ROOT).as_posix()
        for folder in ("worker", "nanobot_hooks")
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and not {"__pycache__", "build"} & set(path.parts) and ".egg-info" not in path.as_posix()
    ]
    for source in (*sources, *package_files):
        assert not ignored(source, patterns), f"{source} must reach the build"
    for other in (
        ".venv/bin/python",
        ".venv-nanobot",
        "tests/scenarios/test_docker.py",
        ".git/HEAD",
        "deploy/worker.env",
        "worker/__pycache__/app.cpython-312.pyc",
        "build/lib/x.py",
        "docs/operations.md",
        "bench/x.py",
        "nanobot_hooks/build/lib/nanobot_hooks/plugin.py",
        "nanobot_hooks/nanobot_summary_hooks.egg-info/PKG-INFO",
    ):
        assert ignored(other, patterns), f"{other} stays out of the build context"


def test_the_worker_images_steps_as_written_build_and_install_a_worker_that_runs(
    project_wheels: Path, installed_worker: InstalledWorker, tmp_path: Path
) -> None:
    """The two RUNs as written (paths moved into a temporary folder): the wheels build from the copied context, the
    worker's wheel installs with its dependencies, and its command answers (the RUN checks `--version`). The install
    (litellm: minutes) is the run's one install of the worker, shared with tests/scenarios/test_packaging.py: it
    installs the wheels the README's command built, which hold the same files as the ones the image's step builds."""
    context = copy_build_context(tmp_path / "src", WORKER_DOCKERFILE)
    built = image_wheels(WORKER_DOCKERFILE, context, tmp_path / "wheels")
    assert [path.name.split("-")[0] for path in built] == ["nanobot_summary_hooks", "nanobot_summary_worker"]
    for wheel in built:
        (same,) = project_wheels.glob(wheel.name)
        assert sorted(zipfile.ZipFile(wheel).namelist()) == sorted(zipfile.ZipFile(same).namelist()), wheel.name
    from nanobot_hooks.contract.version import RELEASE

    assert installed_worker.output.strip().splitlines()[-1] == f"nanobot-summary {RELEASE}", installed_worker.output
    assert not installed_worker.wheels.exists(), "the wheels are removed once installed"
    assert (installed_worker.prefix / "bin" / "arq").exists(), "the compose files' health check runs the image's arq"


# --- one zone: nanobot's timestamps read as nanobot wrote them ----------------------------------------------------


def zone_a_day_off_utc() -> str:
    """A zone whose date differs from UTC's right now, so reading in the wrong zone moves the day."""
    return "Pacific/Kiritimati" if datetime.now(timezone.utc).hour >= 10 else "Pacific/Pago_Pago"  # +14 / -11


def container_env(service: dict[str, Any], home: Path, **outside: str) -> dict[str, str]:
    """The service's environment, as its process sees it here: nanobot's folder's path under `home` (the image's
    /home/nanobot), and a container's UTC where the file gives no TZ."""
    env = process_env(test_defaults=False)
    env.pop("TZ", None)
    for key, value in {**env_file(DEPLOY / f"{service['env_file']}.example"), **service_env(service)}.items():
        env[key] = value.replace(IMAGE_HOME, str(home))
    env.setdefault("TZ", "UTC")  # nanobot's image and python:3.12-slim: /etc/localtime is UTC
    env.update(outside)
    return env


@pytest.mark.parametrize(
    "defaults",
    [
        {"timezone": "UTC", "timezoneMode": "auto"},  # as nanobot's onboard writes it: the container's zone
        {"timezoneMode": "manual", "timezone": "Asia/Shanghai"},  # named: still written in the container's zone
    ],
    ids=["onboard-auto", "manual-zone"],
)
def test_a_message_nanobot_writes_is_dated_by_the_worker_on_nanobots_day(
    tmp_path: Path, fake_llm, redis_url: str, defaults: dict[str, str]
) -> None:
    """`nanobot agent` (no -c: ~/.nanobot/config.json, as in the image) under the gateway's environment writes a
    turn; the worker's own code under the worker's environment dates it for the notes. Same instant, same day."""
    exe = find_nanobot()
    zone = zone_a_day_off_utc()
    services = resolved({"TZ": zone})["services"]
    home = tmp_path / "home"  # /home/nanobot in both containers
    (home / ".nanobot").mkdir(parents=True)
    config = {
        "agents": {
            "defaults": {
                "workspace": "~/.nanobot/workspace",
                "provider": "custom",
                "model": "fake-model",
                "contextWindowTokens": 128000,
                "maxTokens": 1024,
                "idleCompactAfterMinutes": 0,
                "dream": {"enabled": False},
                **defaults,
            }
        },
        "providers": {"custom": {"apiBase": fake_llm.url, "apiKey": "sk-fake"}},
    }
    (home / ".nanobot" / "config.json").write_text(json.dumps(config), encoding="utf-8")

    # Only Redis's address differs outside a container.
    nanobot_env = container_env(services["nanobot-gateway"], home, REDIS_URL=redis_url)
    started = time.time()
    turn = subprocess.run(
        [str(exe), "agent", "-s", "telegram:42", "-m", "what day is it?", "--no-markdown"],
        cwd=tmp_path,
        env=nanobot_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    ended = time.time()
    assert turn.returncode == 0, turn.stderr[-3000:]
    # nanobot's own zone: its config, resolved by nanobot (auto mode: its process's zone).
    resolve = subprocess.run(
        [
            str(nanobot_python(exe)),
            "-c",
            "from nanobot.config.loader import load_config; print(load_config().agents.defaults.timezone)",
        ],
        env=nanobot_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resolve.returncode == 0, resolve.stderr[-3000:]
    nanobots_zone = resolve.stdout.strip().splitlines()[-1]
    assert nanobots_zone == (zone if defaults["timezoneMode"] == "auto" else defaults["timezone"])

    probe = (
        "import json\n"
        "from worker.settings import load_settings\n"
        "from worker.nanobot.config import NanobotConfig\n"
        "from worker.nanobot.sessions import read_session\n"
        "from worker.service.build import notes_timezone\n"
        "from worker.text.prepare import transcript\n"
        "settings = load_settings()\n"
        "nanobot = NanobotConfig.load(settings.config_path)\n"
        "tz = notes_timezone(settings, nanobot)\n"
        "session = read_session(nanobot.sessions_dir, 'telegram:42')\n"
        "first = next(i for i, m in enumerate(session.messages) if m.get('role') == 'user')\n"
        "entry = transcript(session.messages, first, first + 1, len, tz)[0]\n"
        "from worker.text.clock import local_time\n"
        "moment = local_time(session.messages[first]['timestamp'], tz)\n"
        "print(json.dumps({'zone': tz.key, 'day': entry.date, 'at': moment.timestamp(),"
        " 'stamp': session.messages[first]['timestamp']}))\n"
    )
    worker_env = container_env(services["worker"], home, REDIS_URL=redis_url)
    read = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=120
    )
    assert read.returncode == 0, read.stderr[-3000:]
    seen = json.loads(read.stdout.strip().splitlines()[-1])
    assert seen["zone"] == nanobots_zone, "notes are dated in the zone nanobot's config resolves to"
    # The naive timestamp is read as the moment nanobot wrote it (a reading in another zone is hours off) ...
    assert started - 1 <= seen["at"] <= ended + 1, (seen, started, ended)
    # ... and lands on the day nanobot's zone had then.
    days = {datetime.fromtimestamp(t, ZoneInfo(nanobots_zone)).date().isoformat() for t in (started, ended)}
    assert seen["day"] in days, (seen, days)


# --- published ports that reach nanobot, health checks, one Redis address -----------------------------------------

LISTEN = DEPLOY / "nanobot" / "listen_in_container.py"
# What `nanobot onboard` writes for the gateway and its web chat (host on the loopback, the WebUI password as
# the token-issue secret, a token required).
ONBOARDED = {
    "gateway": {"host": "127.0.0.1", "port": 18790},
    "channels": {
        "websocket": {
            "enabled": True,
            "host": "127.0.0.1",
            "port": 8765,
            "tokenIssueSecret": "webui-password",
            "websocketRequiresToken": True,
        }
    },
    "agents": {"defaults": {"workspace": "~/.nanobot/workspace"}},
}


def run_listen(path: Path) -> subprocess.CompletedProcess[str]:
    """The script as the compose file's comment runs it: read from stdin by a Python (nanobot's image's, whose
    standard library is all it needs), NANOBOT_CONFIG set."""
    return subprocess.run(
        [sys.executable, "-"],
        input=LISTEN.read_text(encoding="utf-8"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NANOBOT_CONFIG": str(path)},
    )


def nanobot_reads(path: Path) -> dict[str, Any]:
    """The config as nanobot 0.3.5's own classes read it: the gateway's host and port, the web chat's (its
    validators refuse 0.0.0.0 without authentication)."""
    probe = (
        "import json, sys; from nanobot.config.loader import load_config; "
        "from nanobot.channels.websocket.runtime import WebSocketConfig; "
        "c = load_config(__import__('pathlib').Path(sys.argv[1])); "
        "w = WebSocketConfig.model_validate(c.channels.websocket); "
        "print(json.dumps({'gateway': [c.gateway.host, c.gateway.port], 'web': [w.host, w.port, "
        "w.websocket_requires_token]}))"
    )
    done = subprocess.run(
        [str(nanobot_python(find_nanobot())), "-c", probe, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_published_ports_reach_nanobot_once_its_config_listens_inside_the_container(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ONBOARDED, indent=2), encoding="utf-8")
    path.chmod(0o600)
    assert nanobot_reads(path) == {"gateway": ["127.0.0.1", 18790], "web": ["127.0.0.1", 8765, True]}, (
        "as onboard leaves it: Docker's forwarded ports would reach nothing"
    )
    done = run_listen(path)
    assert done.returncode == 0, done.stderr
    # nanobot itself accepts it (a web chat on 0.0.0.0 needs authentication), on the ports the compose file publishes.
    read = nanobot_reads(path)
    assert read == {"gateway": ["0.0.0.0", 18790], "web": ["0.0.0.0", 8765, True]}, read
    published = {port.split(":")[2] for port in resolved(VARIABLES)["services"]["nanobot-gateway"]["ports"]}
    assert published == {str(read["gateway"][1]), str(read["web"][1])}
    changed = json.loads(path.read_text(encoding="utf-8"))
    assert changed["agents"] == ONBOARDED["agents"] and changed["channels"]["websocket"]["tokenIssueSecret"]
    assert path.stat().st_mode & 0o777 == 0o600, "the config's mode is kept (it holds keys)"
    assert run_listen(path).returncode == 0 and "already listens" in run_listen(path).stdout
    # The compose file says how to run it, and the docs' quick start too.
    command = "run --rm --no-deps -T --entrypoint python nanobot-cli - < deploy/nanobot/listen_in_container.py"
    assert command in " ".join(COMPOSE.read_text(encoding="utf-8").replace("\\\n#", " ").split())
    assert command in (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")


def test_a_web_chat_without_authentication_gets_a_random_password_never_printed(tmp_path: Path) -> None:
    """A plain `onboard` sets no WebUI password: the script sets a random one, so nanobot accepts the web chat on
    0.0.0.0 and the documented steps go on without the wizard."""
    open_chat = {
        **ONBOARDED,
        "channels": {"websocket": {"enabled": True, "host": "127.0.0.1", "websocketRequiresToken": False}},
    }
    passwords = []
    for name in ("one.json", "two.json"):
        path = tmp_path / name
        path.write_text(json.dumps(open_chat), encoding="utf-8")
        done = run_listen(path)
        assert done.returncode == 0, done.stderr
        password = json.loads(path.read_text(encoding="utf-8"))["channels"]["websocket"]["tokenIssueSecret"]
        assert len(password) >= 32 and password not in done.stdout + done.stderr, "set, and never printed"
        assert "random WebUI password" in done.stdout
        passwords.append(password)
    assert passwords[0] != passwords[1], "random, not a default anyone knows"
    assert nanobot_reads(tmp_path / "one.json")["web"][:2] == ["0.0.0.0", 8765], "nanobot accepts it"


def test_ports_other_than_nanobots_defaults_are_named_with_the_variable_that_publishes_them(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    moved = {**ONBOARDED, "gateway": {"host": "127.0.0.1", "port": 18800}}
    path.write_text(json.dumps(moved), encoding="utf-8")
    done = run_listen(path)
    assert done.returncode == 0 and "set NANOBOT_GATEWAY_PORT=18800" in done.stdout, done.stdout
    assert "NANOBOT_WEB_CHAT_PORT" not in done.stdout, "the web chat keeps the default port"
    ports = resolved({**VARIABLES, "NANOBOT_GATEWAY_PORT": "18800"})["services"]["nanobot-gateway"]["ports"]
    assert [port.split(":")[2] for port in ports] == ["18800", "8765"]


def test_every_long_running_service_has_a_health_check_and_the_gateways_asks_nanobot(tmp_path: Path) -> None:
    services = compose()["services"]
    for name, service in services.items():
        if "profiles" in service:
            continue  # nanobot-cli: a one-off command
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    test = services["nanobot-gateway"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], "nanobot's image has Python on PATH, no curl"
    tested = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    assert all(service.get("healthcheck") for service in tested.values())
    # The gateway's check asks the port nanobot's config names, as nanobot's user (HOME) sees it.
    home = tmp_path / "home"
    (home / ".nanobot").mkdir(parents=True)
    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), HealthHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = home / ".nanobot" / "config.json"
        check = [sys.executable, "-c", test[3]]
        config.write_text(json.dumps({"gateway": {"port": port}}), encoding="utf-8")
        assert subprocess.run(check, env={**os.environ, "HOME": str(home)}, timeout=60).returncode == 0
        config.write_text(json.dumps({"gateway": {"port": free_port()}}), encoding="utf-8")
        assert (
            subprocess.run(check, env={**os.environ, "HOME": str(home)}, timeout=60, capture_output=True).returncode
            != 0
        ), "nothing on that port: unhealthy"
    finally:
        server.shutdown()
        server.server_close()


class HealthHandler(http.server.BaseHTTPRequestHandler):
    """nanobot's health endpoint, as far as the check reads it: 200 on /health."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_one_redis_address_for_a_nanobot_on_the_host_across_the_examples() -> None:
    from worker.settings import Settings

    example = env_file(DEPLOY / "worker.env.example")["REDIS_URL"]
    tested = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))
    (port,) = tested["services"]["redis"]["ports"]
    host_ip, host_port, container_port = interpolate(port, {}).split(":")
    assert example == f"redis://{host_ip}:{host_port}/0" == Settings.model_fields["redis_url"].default
    assert container_port == "6379"
