"""`nanobot-summary hooks install|uninstall|check`: the hooks of this worker's own version put into nanobot's
environment without changing any package nanobot holds, taken out again with what they added, and checked
there as nanobot loads them."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from nanobot_hooks.contract.version import RELEASE
from worker.commands.nanobot_env import (HOOKS_DIST, OLD_DIST, NanobotEnvError, Probe, find_python, probe,
                                         run_isolated)

# What install added, kept in the hooks' own dist-info folder: uninstall takes out those and nothing else.
ADDED_FILE = "nanobot_summary_added.json"
CHECKOUT_HOOKS = Path(__file__).resolve().parents[2] / "hooks"

INSPECT = """\
import importlib.metadata as m, json, os, re, sys, sysconfig
name, removing = sys.argv[1], set(sys.argv[2:])
canon = lambda n: n.lower().replace("_", "-").replace(".", "-")
site = sysconfig.get_path("purelib")
needed, dists, info = set(), {}, None
for dist in m.distributions():
    own = canon(dist.metadata["Name"])
    dists[own] = dist.version
    if own == canon(name) and dist.files:
        info = next((str(f.locate().parent) for f in dist.files if f.name == "METADATA"), None)
    if own in removing:
        continue
    for line in dist.requires or []:
        # The name a requirement starts with (PEP 508); extras and markers count as needed too: kept, not removed.
        if found := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line):
            needed.add(canon(found.group(0)))
print(json.dumps({"site": site, "writable": os.access(site, os.W_OK), "dists": dists, "info": info,
                  "needed": sorted(needed)}))
"""


def canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def inspect(python: Path, name: str = HOOKS_DIST, removing: tuple[str, ...] = ()) -> dict[str, object]:
    """nanobot's site-packages: where, writable or not, its distributions, the hooks' dist-info folder, and
    the names the distributions outside `removing` require."""
    result = run_isolated(python, ["-c", INSPECT, name, *removing])
    if result.returncode != 0:
        raise NanobotEnvError(f"cannot inspect nanobot's environment with {python}: {last_line(result.stderr)}")
    found: dict[str, object] = json.loads(result.stdout)
    return found


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def hooks_source(given: str | None) -> str:
    """What pip installs: the given wheel, sdist or folder; this checkout's hooks/ when the worker runs from
    one; else this release from the package index."""
    if given:
        return str(Path(given).resolve())
    if (CHECKOUT_HOOKS / "pyproject.toml").exists():
        return str(CHECKOUT_HOOKS)
    return f"{HOOKS_DIST}=={RELEASE}"


def pip(python: Path, args: list[str]) -> tuple[bool, str]:
    result = run_isolated(python, ["-m", "pip", "--disable-pip-version-check", *args], timeout=900)
    return result.returncode == 0, result.stdout + result.stderr


def install(given_python: str | None, source: str | None) -> int:
    python = find_python(given_python)
    before = inspect(python)
    dists = before["dists"]
    assert isinstance(dists, dict)
    if not dists.get("nanobot-ai"):
        raise NanobotEnvError(f"{python} has no nanobot-ai: name nanobot's own Python with --python")
    if not before["writable"]:
        raise NanobotEnvError(f"cannot write nanobot's environment {before['site']}: run this as its owner "
                              "(or with sudo -u <that user>), or name another Python with --python")
    what = hooks_source(source)
    with tempfile.TemporaryDirectory(prefix="nanobot-summary-hooks-") as folder:
        constraints = Path(folder) / "nanobot-packages.txt"
        # Every package nanobot's environment holds stays at its version: a conflict fails, nothing moves.
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(dists.items())
                                       if name not in (HOOKS_DIST, OLD_DIST)), encoding="utf-8")
        base = ["install", "--constraint", str(constraints), what]
        ok, output = pip(python, [*base[:1], "--dry-run", "--quiet", *base[1:]])
        if not ok:
            raise NanobotEnvError(f"the hooks {RELEASE} cannot go into nanobot's environment without changing "
                                  f"its packages (nothing was changed): {last_line(output)}")
        if dists.get(OLD_DIST):
            # The hooks before 0.2.0, installed under the worker's name: their files are the same package.
            pip(python, ["uninstall", "--yes", OLD_DIST])
            print(f"removed the old {OLD_DIST} {dists[OLD_DIST]} (the hooks before 0.2.0) from {python}")
        ok, output = pip(python, base)
    if not ok:
        raise NanobotEnvError(f"pip could not install the hooks into {python} (it undid its changes): "
                              f"{last_line(output)}")
    after = inspect(python)
    now = after["dists"]
    assert isinstance(now, dict)
    added = sorted(set(now) - set(dists) - {HOOKS_DIST})
    if isinstance(after["info"], str):
        (Path(after["info"]) / ADDED_FILE).write_text(json.dumps({"added": added}), encoding="utf-8")
    found = probe(python)
    print(f"installed {HOOKS_DIST} {found.hooks} from {what} into nanobot {found.nanobot}'s environment ({python})"
          + (f", with {', '.join(added)}" if added else ", with nothing else")
          + "; none of nanobot's packages changed")
    return report(found)


def uninstall(given_python: str | None) -> int:
    python = find_python(given_python)
    before = inspect(python)
    dists = before["dists"]
    assert isinstance(dists, dict)
    ours = [name for name in (HOOKS_DIST, OLD_DIST) if dists.get(name)]
    if not ours:
        print(f"the hooks are not installed in {python}: nothing to remove")
        return 0
    added: list[str] = []
    if isinstance(before["info"], str) and (record := Path(before["info"]) / ADDED_FILE).exists():
        added = json.loads(record.read_text(encoding="utf-8"))["added"]
    needed = inspect(python, removing=(*ours, *added))["needed"]
    assert isinstance(needed, list)
    removable = [name for name in added if name in dists and name not in needed]
    ok, output = pip(python, ["uninstall", "--yes", *ours, *removable])
    if not ok:
        raise NanobotEnvError(f"pip could not remove the hooks from {python}: {last_line(output)}")
    kept = sorted(set(added) - set(removable))
    print(f"removed {', '.join(ours + removable)} from {python}"
          + (f"; kept {', '.join(kept)} (other packages need them)" if kept else "")
          + ("" if added
             else "; packages the hooks brought in before (arq, redis) are left: install did not record them")
          + ". A running nanobot keeps its hooks until it restarts.")
    return 0


def check(given_python: str | None) -> int:
    return report(probe(find_python(given_python)))


def report(found: Probe) -> int:
    """What nanobot will load at its next start, in one line (and each entry point that fails)."""
    for name, error in sorted(found.errors.items()):
        print(f"FAIL nanobot cannot load its entry point {name}: {error}")
    if found.hooks_load and not found.errors:
        print(f"ok hooks {found.hooks} load in nanobot {found.nanobot}'s environment ({found.python}): "
              f"{', '.join(sorted(found.loaded))}")
        return 0
    if not found.hooks_load:
        print(f"FAIL the hooks are not installed in nanobot's environment ({found.python}): "
              f"nanobot-summary hooks install --python {found.python}")
    return 1
