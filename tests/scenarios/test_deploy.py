"""The service files in deploy/: the systemd units verify with systemd-analyze and run the installed command, which
runs; every supervisor shipped (the unit, both compose files, the Procfile) restarts the worker after a workspace
move; the compose file's Redis persists and its commands (Redis, worker, health checks) run as written, outside a
container (this machine has no Docker daemon)."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import forks
from harness.environment import process_env
from harness.nanobot_cli import find_nanobot
from harness.redis_server import free_port
from harness.transcripts import conversation
from nanobot_hooks.contract.keys import WORKSPACE_ID_FILE, Keys, default_namespace
from nanobot_hooks.contract.queue import load_record, store_record
from nanobot_hooks.contract.records import SummaryRecord
from nanobot_hooks.contract.version import RELEASE
from tests.support.paths import ROOT
from tests.support.waiting import wait_until
from worker.connections import answers, queue_client
from worker.nanobot.config import host_timezone
from worker.service.arq_worker import worker_options
from worker.settings import Settings

DEPLOY = ROOT / "deploy"
# The placeholders the units document, and what stands in for them here.
CHECKOUT = "/opt/nanobot-summary-worker"
INSTALLED = "/opt/nanobot-summary/bin/nanobot-summary"  # the worker's wheel installed into /opt/nanobot-summary
NANOBOT_EXE = "/home/nanobot/.venvs/nanobot/bin/nanobot"
WORKER_UNIT, GATEWAY_UNIT = "nanobot-summary-worker.service", "nanobot-gateway.service"


def unit_entries(name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every setting, repeated keys included, as systemd reads them."""
    entries, section = [], ""
    for line in (DEPLOY / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            entries.append((section, key, value))
    return entries


def setting(name: str, key: str) -> list[str]:
    return [value for section, k, value in unit_entries(name) if section == "Service" and k == key]


def env_file(path: Path) -> dict[str, str]:
    """KEY=value lines, as systemd's EnvironmentFile= and compose's env_file: read them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_the_worker_unit_runs_the_installed_command_restarts_on_failure_and_gives_arqs_clean_stop_time() -> None:
    assert setting(WORKER_UNIT, "ExecStart") == [f"{INSTALLED} run --no-embedded-redis"]
    assert setting(WORKER_UNIT, "WorkingDirectory") == [], "the installed command needs no checkout to run in"
    assert setting(WORKER_UNIT, "Restart") == ["on-failure"]
    assert setting(WORKER_UNIT, "EnvironmentFile") == setting(GATEWAY_UNIT, "EnvironmentFile") != []
    assert setting(WORKER_UNIT, "User") == setting(GATEWAY_UNIT, "User") != [], "one user owns the session files"
    # SIGTERM re-queues the running job at once; systemd must not SIGKILL before arq waited for its jobs.
    waits = worker_options(Settings()).get("job_completion_wait", 0)
    assert int(setting(WORKER_UNIT, "TimeoutStopSec")[0]) >= waits + 30
    assert setting(WORKER_UNIT, "ProtectSystem") == ["strict"]
    # Its environment is read, never written (root's, installed once): nanobot's folders only.
    assert set(setting(WORKER_UNIT, "ReadWritePaths")) == {
        "/home/nanobot/.nanobot/sessions",
        "/home/nanobot/.nanobot/workspace/memory",
    }
    web = "nanobot-summary-web.service"
    assert setting(web, "ExecStart")[0].startswith(f"{INSTALLED} web "), "the page from the same installed command"
    assert setting(web, "WorkingDirectory") == []
    assert setting(GATEWAY_UNIT, "ExecStart")[0].startswith(f"{NANOBOT_EXE} gateway --foreground")


@pytest.mark.parametrize("name", [WORKER_UNIT, GATEWAY_UNIT])
def test_the_units_verify_cleanly_with_systemd_analyze(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("needs systemd-analyze")
    text = (DEPLOY / name).read_text(encoding="utf-8")
    nanobot = find_nanobot() if name == GATEWAY_UNIT else None
    real = {
        INSTALLED: str(Path(sys.prefix) / "bin" / "nanobot-summary"),
        NANOBOT_EXE: str(nanobot),
        "User=nanobot": f"User={pwd.getpwuid(os.getuid()).pw_name}",
        "Group=nanobot": f"Group={grp.getgrgid(os.getgid()).gr_name}",
    }
    for placeholder, value in real.items():
        text = text.replace(placeholder, value)
    (tmp_path / name).write_text(text, encoding="utf-8")
    result = subprocess.run([analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and (result.stdout + result.stderr).strip() == "", result.stdout + result.stderr


def installed(command: list[str]) -> list[str]:
    """A unit's or compose file's `nanobot-summary ...` as this checkout's code runs it (the installed wheel's
    command is this entry point: tests/scenarios/test_packaging.py runs that one)."""
    assert Path(command[0]).name == "nanobot-summary", command
    return [sys.executable, "-m", "worker", *command[1:]]


@pytest.mark.slow  # worker or nanobot processes, or a package build
def test_the_worker_units_command_runs_with_the_example_environment(nanobot_home, redis_url) -> None:
    command = installed(setting(WORKER_UNIT, "ExecStart")[0].split())
    unit_env = dict(pair.split("=", 1) for value in setting(WORKER_UNIT, "Environment") for pair in value.split())
    env = process_env(
        redis_url=redis_url,
        test_defaults=False,
        **{**env_file(DEPLOY / "worker.env.example"), **unit_env, "NANOBOT_CONFIG": str(nanobot_home.config_path)},
    )
    result = forks.run([*command, "--burst"], env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    dead = forks.run(command, {**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, cwd=ROOT, timeout=300)
    assert dead.returncode == 2 and "does not answer" in dead.stderr, "no throwaway Redis under systemd"


# --- docker compose ---------------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}`, `${NAME:?error}` and `$$` (a literal dollar)."""
    value = re.sub(r"(?<!\$)\$\{(\w+)(?::?[-?][^}]*)?\}", lambda m: variables[m.group(1)], value)
    return value.replace("$$", "$")


def test_compose_runs_the_worker_beside_a_redis_that_persists() -> None:
    spec = compose()
    redis, worker = spec["services"]["redis"], spec["services"]["worker"]
    command = redis["command"]
    assert command[0] == "redis-server" and command[command.index("--appendonly") + 1] == "yes"
    volume, target = redis["volumes"][0].split(":")
    assert target == "/data" and volume in spec["volumes"], "Redis keeps its files in a named volume"
    assert "redis-cli" in redis["healthcheck"]["test"] and redis["restart"] == worker["restart"] == "unless-stopped"

    assert worker["command"] == ["nanobot-summary", "run", "--no-embedded-redis"], "the installed command"
    assert (
        DEPLOY / worker["build"]["context"] / worker["build"]["dockerfile"]
    ).resolve() == DEPLOY / "worker" / "Dockerfile", "the image the wheels are installed in"
    assert worker["image"].endswith(":" + RELEASE), "the image is tagged with the release it holds"
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["environment"]["REDIS_URL"].startswith("redis://redis:6379/")
    assert "working_dir" not in worker and not [v for v in worker["volumes"] if v.startswith("..")], (
        "nothing of the checkout is mounted: the image's wheels are what runs"
    )
    assert worker["healthcheck"]["test"] == ["CMD", "python", "-m", "worker.service.health"]
    assert (DEPLOY / f"{worker['env_file']}.example").exists()
    assert f"deploy/{worker['env_file']}" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert worker["user"].startswith("${NANOBOT_UID"), "the worker writes nanobot's files as nanobot's user"
    waits = worker_options(Settings()).get("job_completion_wait", 0)
    assert int(worker["stop_grace_period"].rstrip("s")) >= waits + 30


def test_every_shipped_supervisor_runs_the_installed_worker_and_restarts_it_after_a_workspace_move() -> None:
    """A move of nanobot to another workspace stops the worker (issue 33 point 7). `nanobot-summary run` starts
    itself again in the same process (exec: no exit for any supervisor, honcho's included, which ends every
    process when one does; arq's own command line does the same). Every supervisor we ship runs the installed
    command, never arq's, and restarts a failure."""
    commands = [setting(WORKER_UNIT, "ExecStart")[0].split()]
    restarts = {}
    for name in ("docker-compose.yml", "docker-compose.nanobot.yml"):
        spec = yaml.safe_load((DEPLOY / name).read_text(encoding="utf-8"))
        commands.append(spec["services"]["worker"]["command"])
        restarts[name] = spec["services"]["worker"]["restart"]
    procfile = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines() if line.strip()
    )
    commands.append(procfile["worker"].split())
    assert len(commands) == 4
    assert all(Path(command[0]).name == "nanobot-summary" and command[1] == "run" for command in commands), commands
    assert not any("worker.app" in " ".join(command) or "arq" in command for command in commands)
    assert setting(WORKER_UNIT, "Restart")[0] in ("on-failure", "always")
    # compose: any exit but `docker compose stop` is restarted.
    assert set(restarts.values()) <= {"unless-stopped", "always"}, restarts
    # The checkout's path stays the same entry: scripts/run-worker execs `python -m worker run`.
    launcher = (ROOT / "scripts" / "run-worker").read_text(encoding="utf-8").splitlines()
    assert [line for line in launcher if line.startswith("exec ")] == ['exec "$VENV/bin/python" -m worker run "$@"']
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert entry == {"nanobot-summary": "worker.commands.cli:main"}, "the installed command is `python -m worker`"


def test_compose_gives_the_worker_the_hosts_timezone() -> None:
    worker = compose()["services"]["worker"]
    assert "/etc/localtime:/etc/localtime:ro" in worker["volumes"], "the host's zone file, read-only"
    # Passed through without a value: set when the host's TZ is, unset otherwise (an empty TZ means UTC).
    assert "TZ" in worker["environment"] and worker["environment"]["TZ"] is None


@pytest.mark.parametrize(
    "config_zone, tz, warned",
    [
        (None, None, True),  # a container without TZ: this machine's zone is UTC, as an image's is
        (None, "Asia/Shanghai", False),
        ("Asia/Shanghai", None, False),
    ],
    ids=["no-zone-anywhere", "tz-passed-in", "nanobot-names-one"],
)
@pytest.mark.slow  # worker or nanobot processes, or a package build
def test_a_worker_dating_notes_in_utc_by_default_says_so_at_start_up_once(
    nanobot_home, fake_llm, redis_url, config_zone, tz, warned
) -> None:
    if warned and host_timezone() != "UTC":
        pytest.skip("this machine's own zone is not UTC, as a container's is")
    nanobot_home.write_config(fake_llm.url, timezone=config_zone)
    # The user's defaults but the priority: lowered, the worker yields to any load, and on a busy machine its start
    # outlasted the bound (this test is about the zone, not the priority).
    env = {
        k: v
        for k, v in process_env(
            redis_url=redis_url,
            test_defaults=False,
            NANOBOT_SUMMARY_NICENESS="0",
            NANOBOT_CONFIG=str(nanobot_home.config_path),
        ).items()
        if k != "TZ"
    }
    if tz:
        env["TZ"] = tz
    result = forks.run([sys.executable, "-m", "worker", "--burst"], env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "notes are dated in UTC" in line]
    assert len(lines) == (1 if warned else 0), result.stderr[-3000:]
    if warned:
        assert "NANOBOT_SUMMARY_TIMEZONE" in lines[0] and "TZ" in lines[0]
        # Said without calling the machine a container: the markers that tell one may sit on a VM's image.
        assert "the zone this worker sees is UTC" in lines[0] and "container's" not in lines[0], lines[0]


def start_redis(command: list[str], port: int, folder: Path) -> subprocess.Popen[bytes]:
    """The compose file's Redis command as written, on a free local port, its dir (./) being `folder`."""
    if shutil.which(command[0]) is None:
        pytest.skip(f"needs {command[0]}")
    folder.mkdir(exist_ok=True)
    process = subprocess.Popen(
        [*command, "--port", str(port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not answers(f"redis://127.0.0.1:{port}/0"):
        assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    return process


def stop(process: subprocess.Popen[bytes] | forks.ForkedProcess, how: signal.Signals = signal.SIGTERM) -> int:
    if process.poll() is None:
        process.send_signal(how)
    return process.wait(timeout=60)


@pytest.mark.slow  # worker or nanobot processes, or a package build
async def test_compose_commands_run_as_written_and_a_waiting_record_survives_a_redis_kill(
    nanobot_home, tmp_path
) -> None:
    spec = compose()
    redis_spec, worker_spec = spec["services"]["redis"], spec["services"]["worker"]
    port, data = free_port(), tmp_path / "data"
    url = f"redis://127.0.0.1:{port}/0"
    redis_server = start_redis(redis_spec["command"], port, data)
    # The compose variables, for a host home whose .nanobot is the test's nanobot folder.
    host_home = tmp_path / "home"
    host_home.mkdir()
    (host_home / ".nanobot").symlink_to(nanobot_home.root)
    variables = {"NANOBOT_HOST_HOME": str(host_home), "NANOBOT_UID": str(os.getuid()), "NANOBOT_GID": str(os.getgid())}
    # A variable without a value is passed through from the caller's environment (TZ), as compose does.
    env = process_env(
        test_defaults=False,
        **{
            **env_file(DEPLOY / "worker.env.example"),
            **{k: interpolate(v, variables) for k, v in worker_spec["environment"].items() if v is not None},
        },
    )
    # Only these differ outside a container: Redis's service name, the image's environment first on PATH (its arq;
    # its `nanobot-summary` is this checkout's `python -m worker`, see installed()), and the worker's priority, kept
    # as the other tests keep it (harness/defaults.py): lowered, beside two busy loops it had not reported its health
    # after the two minutes this test waits.
    env.update(REDIS_URL=url, PATH=f"{Path(sys.prefix) / 'bin'}:{env['PATH']}", NANOBOT_SUMMARY_NICENESS="0")
    # No NANOBOT_SUMMARY_NAMESPACE there: the worker serves the namespace of the nanobot whose config it reads.
    keys = Keys(default_namespace((nanobot_home.workspace / WORKSPACE_ID_FILE).read_text(encoding="utf-8").strip()))

    def healthy(spec: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
        kind, *test = spec["healthcheck"]["test"]
        argv = ["sh", "-c", interpolate(test[0], variables)] if kind == "CMD-SHELL" else [test[0], *extra, *test[1:]]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    worker = None
    try:
        assert "PONG" in healthy(redis_spec, "-p", str(port)).stdout
        assert healthy(worker_spec).returncode != 0, "no worker yet: the check fails"
        with open(os.devnull, "wb") as nowhere:
            worker = forks.popen(installed(worker_spec["command"]), env, cwd=ROOT, stdout=nowhere, stderr=nowhere)
        pool = queue_client(url, keys.queue)
        try:
            await wait_until(lambda: pool.exists(f"{keys.queue}:health-check"), 120, "the worker's health report")
            check = healthy(worker_spec)
            assert check.returncode == 0, check.stdout + check.stderr
            assert stop(worker) == 0
            assert healthy(worker_spec).returncode != 0, "a stopped worker removes its health report"

            messages = conversation(3)
            record = SummaryRecord(
                session_key="telegram:42",
                summary="kept",
                start=0,
                boundary=4,
                boundary_timestamp=messages[3]["timestamp"],
                messages_before=6,
                messages_after=3,
                tokens_before=600,
                tokens_after=200,
            )
            await store_record(pool, record)
        finally:
            await pool.aclose()
        stop(redis_server, signal.SIGKILL)  # no shutdown save: only the append-only file can keep the record
        redis_server = start_redis(redis_spec["command"], port, data)
        pool = queue_client(url, keys.queue)
        try:
            kept = await load_record(pool, "telegram:42")
        finally:
            await pool.aclose()
        assert kept is not None and kept.summary == "kept"
        shown = forks.run(
            [sys.executable, "-m", "worker", "status", "--json"],
            env,
            cwd=ROOT,
            timeout=60,
        )
        assert '"session": "telegram:42"' in shown.stdout, shown.stderr
    finally:
        if worker is not None:
            stop(worker)
        stop(redis_server)


@pytest.mark.slow  # worker or nanobot processes, or a package build
def test_a_checkout_the_service_user_cannot_write_fails_with_the_ownership_fix() -> None:
    """The unit on a root-owned checkout: one line naming the chown, before any install (here as `nobody`)."""
    runuser = shutil.which("runuser")
    if runuser is None or os.geteuid() != 0:
        pytest.skip("needs root and runuser to run the script as another user")
    folder = Path(tempfile.mkdtemp(prefix="root-owned-checkout-"))
    try:
        (folder / "scripts").mkdir()
        shutil.copy2(ROOT / "scripts" / "run-worker", folder / "scripts" / "run-worker")
        shutil.copy2(ROOT / "pyproject.toml", folder / "pyproject.toml")
        (folder / "nanobot_hooks").mkdir()
        shutil.copy2(ROOT / "nanobot_hooks" / "pyproject.toml", folder / "nanobot_hooks" / "pyproject.toml")
        folder.chmod(0o755)
        result = subprocess.run(
            [runuser, "-u", "nobody", "--", str(folder / "scripts" / "run-worker"), "--burst"],
            capture_output=True,
            text=True,
            timeout=60,
            env=process_env(test_defaults=False),
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == (
            f"error: .venv must be (re)installed, and user nobody cannot write it in "
            f"{folder}: sudo chown -R nobody: {folder} (see "
            "deploy/nanobot-summary-worker.service)"
        ), result.stderr
        assert not (folder / ".venv").exists()
    finally:
        shutil.rmtree(folder)
    unit = (DEPLOY / WORKER_UNIT).read_text(encoding="utf-8")
    assert f"sudo chown -R nanobot: {CHECKOUT}" in unit, "the unit's header says who owns the checkout"
