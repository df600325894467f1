"""`nanobot-summary hooks install|uninstall|check`.

The hooks of this worker's own version put into nanobot's environment without changing any package nanobot holds, taken
out again with what they added, and checked there as nanobot loads them."""

from __future__ import annotations

import json
import os
import pwd
import re
import tempfile
from pathlib import Path

from nanobot_hooks.contract.version import RELEASE
from worker.commands.nanobot_env import HOOKS_DIST, OLD_DIST, NanobotEnvError, Probe, find_python, probe, run_isolated
from worker.commands.wheels import NoWheelError, carried_wheels

# What install added, kept in the hooks' own dist-info folder: uninstall takes out those and nothing else.
ADDED_FILE = "nanobot_summary_added.json"

INSPECT = """\
import importlib.metadata as m, json, os, re, sys, sysconfig
name, removing = sys.argv[1], set(sys.argv[2:])
canon = lambda n: n.lower().replace("_", "-").replace(".", "-")
site = sysconfig.get_path("purelib")
needed, dists, info = set(), {}, None
for dist in m.distributions():
    if not dist.metadata["Name"]:
        continue  # a dist-info folder without metadata (left by an earlier uninstall): no distribution
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
print(json.dumps({"site": site, "writable": os.access(site, os.W_OK), "owner": os.stat(site).st_uid,
                  "dists": dists, "info": info, "needed": sorted(needed)}))
"""


def canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def inspect(python: Path, name: str = HOOKS_DIST, removing: tuple[str, ...] = ()) -> dict[str, object]:
    """nanobot's site-packages.

    Where, writable or not, its distributions, the hooks' dist-info folder, and the names the distributions outside
    `removing` require."""
    result = run_isolated(python, ["-c", INSPECT, name, *removing])
    if result.returncode != 0:
        raise NanobotEnvError(f"cannot inspect nanobot's environment with {python}: {last_line(result.stderr)}")
    found: dict[str, object] = json.loads(result.stdout)
    return found


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def unwritable(site: str, owner: object) -> str:
    """Why nanobot's site-packages cannot take the hooks, and what to do.

    Another user's folder, or a read-only one (a read-only mount or mode: root is stopped only by those)."""
    if isinstance(owner, int) and owner != os.getuid():
        try:
            name = pwd.getpwuid(owner).pw_name
        except KeyError:
            name = f"uid {owner}"
        return (
            f"cannot write nanobot's environment {site}: it is {name}'s; run this as its owner "
            f"(sudo -u {name} nanobot-summary hooks install ...), or name another Python with --python"
        )
    return (
        f"cannot write nanobot's environment {site}: it is read-only (its mode or a read-only mount); make it "
        "writable, or name another Python with --python"
    )


def conflict(output: str) -> str:
    """pip's resolver report in one clause.

    Which of nanobot's packages the hooks conflict with, and what they need instead ("nanobot's redis 6.0.0, where
    nanobot-summary-hooks 0.2.0 depends on redis<6 and >=5"); pip's last line when it names no conflict (an index out of
    reach, a wheel that is not one)."""
    pinned = re.findall(r"The user requested \(constraint\) ([A-Za-z0-9._-]+)==(\S+)", output)
    needs = [line.strip() for line in output.splitlines() if " depends on " in line]
    if not pinned:
        return last_line(output)
    held = ", ".join(f"{name} {version}" for name, version in pinned)
    return f"nanobot's {held}, where " + "; ".join(needs) if needs else f"nanobot's {held}"


def missing_distribution(output: str) -> str | None:
    """The distribution pip found no file of (`No matching distribution found for arq==0.28.*`), or None."""
    found = re.search(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)", output) or re.search(
        r"Could not find a version that satisfies the requirement ([A-Za-z0-9][A-Za-z0-9._-]*)", output
    )
    return found.group(1) if found else None


def carried(folder: Path, held: dict[str, str]) -> list[str]:
    """pip's options for the hooks of this worker's own version with no package index.

    Their wheel and those of the packages they need that nanobot's environment lacks (`held`), rebuilt from this
    worker's environment into `folder`."""
    try:
        carried_wheels(HOOKS_DIST, folder, skip=held)
    except (NoWheelError, OSError) as exc:
        raise NanobotEnvError(
            f"this worker cannot carry its hooks ({exc}): install them from a wheel, "
            "nanobot-summary hooks install --from nanobot_summary_hooks-*.whl"
        ) from exc
    return ["--no-index", "--find-links", str(folder)]


def pip(python: Path, args: list[str]) -> tuple[bool, str]:
    result = run_isolated(python, ["-m", "pip", "--disable-pip-version-check", *args], timeout=900)
    return result.returncode == 0, result.stdout + result.stderr


def put_in(python: Path, dists: dict[str, str], info: object, what: str, where: list[str]) -> list[str]:
    """pip's install of the hooks into nanobot's environment, after a dry run.

    pip's install of the hooks `what` (from `where`: pip's options naming where it looks) into nanobot's environment,
    every package it holds as a constraint, after a dry run that changes nothing when it fails; returns what an earlier
    install had recorded as added (`info`: the earlier hooks' dist-info folder)."""
    with tempfile.TemporaryDirectory(prefix="nanobot-summary-hooks-") as folder:
        constraints = Path(folder) / "nanobot-packages.txt"
        # Every package nanobot's environment holds stays at its version: a conflict fails, nothing moves.
        constraints.write_text(
            "".join(
                f"{name}=={version}\n" for name, version in sorted(dists.items()) if name not in (HOOKS_DIST, OLD_DIST)
            ),
            encoding="utf-8",
        )
        base = ["install", *where, "--constraint", str(constraints), what]
        # Not --quiet: the resolver's report names the conflict ("The conflict is caused by: ...").
        ok, output = pip(python, [*base[:1], "--dry-run", *base[1:]])
        if not ok:
            raise NanobotEnvError(refusal(output, "--no-index" in where))
        # An earlier install's record moves to the new dist-info after the install (below): pip would leave it
        # behind in the old dist-info folder (not in that folder's RECORD), a folder without metadata.
        earlier = recorded_added(info)
        if isinstance(info, str):
            (Path(info) / ADDED_FILE).unlink(missing_ok=True)
        if dists.get(OLD_DIST):
            # The hooks before 0.2.0, installed under the worker's name: their files are the same package.
            pip(python, ["uninstall", "--yes", OLD_DIST])
            print(f"removed the old {OLD_DIST} {dists[OLD_DIST]} (the hooks before 0.2.0) from {python}")
        ok, output = pip(python, base)
    if not ok:
        if earlier and isinstance(info, str) and Path(info).is_dir():
            (Path(info) / ADDED_FILE).write_text(json.dumps({"added": earlier}), encoding="utf-8")
        raise NanobotEnvError(
            f"pip could not install the hooks into {python} (it undid its changes): {last_line(output)}"
        )
    return earlier


def refusal(output: str, offline: bool) -> str:
    """Why pip's dry run refused, by its real cause.

    A file of some package found nowhere (with no index asked, when the worker carries the hooks itself), a conflict
    with nanobot's packages, or pip's own last line."""
    missing = missing_distribution(output)
    if "ResolutionImpossible" in output:
        missing = None  # a conflict: pip's lines about a version it could not find are part of it
    if missing and offline:
        return (
            f"no wheel of {missing} for nanobot's Python is at hand (nothing was changed): the hooks {RELEASE} "
            f"need it, nanobot's environment lacks it, and this worker's own environment holds none nanobot's "
            f"Python can use; no package index was asked. Install {missing} into nanobot's environment, or "
            "give the hooks' wheel and an index: --from nanobot_summary_hooks-*.whl"
        )
    if missing:
        return (
            f"no package index or folder holds {missing} (nothing was changed): pip's words: {last_line(output)}. "
            "Leave out --from to install the hooks this worker carries, with no index"
        )
    if "ResolutionImpossible" in output or "conflicting dependencies" in output:
        return (
            f"the hooks {RELEASE} cannot go into nanobot's environment without changing its packages (nothing "
            f"was changed): {conflict(output)}. Install the hooks of a release made for those versions (--from), "
            "or point --python at another nanobot"
        )
    return f"pip refused to install the hooks into nanobot's environment (nothing was changed): {last_line(output)}"


def install(given_python: str | None, source: str | None) -> int:
    python = find_python(given_python)
    before = inspect(python)
    dists = before["dists"]
    assert isinstance(dists, dict)
    if not dists.get("nanobot-ai"):
        raise NanobotEnvError(f"{python} has no nanobot-ai: name nanobot's own Python with --python")
    if not before["writable"]:
        raise NanobotEnvError(unwritable(str(before["site"]), before.get("owner")))
    with tempfile.TemporaryDirectory(prefix="nanobot-summary-wheels-") as folder:
        where = carried(Path(folder), dists)
        if source:  # a wheel, sdist or folder given: an index may still serve what it needs, beside ours
            what, where, said = str(Path(source).resolve()), where[1:], str(Path(source).resolve())
        else:
            what, said = f"{HOOKS_DIST}=={RELEASE}", "this worker's own environment (no package index)"
        earlier = put_in(python, dists, before["info"], what, where)
    after = inspect(python)
    now = after["dists"]
    assert isinstance(now, dict)
    # Over an earlier install (an upgrade): what that one added stays ours to take out, though present before this.
    added = sorted((set(now) - set(dists) | set(earlier) & set(now)) - {HOOKS_DIST})
    if isinstance(after["info"], str):
        (Path(after["info"]) / ADDED_FILE).write_text(json.dumps({"added": added}), encoding="utf-8")
    found = probe(python)
    print(
        f"installed {HOOKS_DIST} {found.hooks} from {said} into nanobot {found.nanobot}'s environment ({python})"
        + (f", with {', '.join(added)}" if added else ", with nothing else")
        + "; none of nanobot's packages changed"
    )
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
    added = recorded_added(before["info"])
    needed = inspect(python, removing=(*ours, *added))["needed"]
    assert isinstance(needed, list)
    removable = [name for name in added if name in dists and name not in needed]
    # Our record is no file of pip's (not in the dist-info's RECORD): left there, it would keep a dist-info folder
    # without metadata, which importlib.metadata then reads as the hooks of no version, hiding a later install.
    info = before["info"]
    record = Path(info) / ADDED_FILE if isinstance(info, str) else None
    kept_record = record.read_bytes() if record is not None and record.exists() else None
    if record is not None:
        record.unlink(missing_ok=True)
    ok, output = pip(python, ["uninstall", "--yes", *ours, *removable])
    if not ok:
        if record is not None and kept_record is not None and record.parent.is_dir():
            record.write_bytes(kept_record)
        raise NanobotEnvError(f"pip could not remove the hooks from {python}: {last_line(output)}")
    if record is not None and record.parent.is_dir() and not any(record.parent.iterdir()):
        record.parent.rmdir()
    kept = sorted(set(added) - set(removable))
    print(
        f"removed {', '.join(ours + removable)} from {python}"
        + (f"; kept {', '.join(kept)} (other packages need them)" if kept else "")
        + ("" if added else "; packages the hooks brought in before (arq, redis) are left: install did not record them")
        + ". A running nanobot keeps its hooks until it restarts."
    )
    return 0


def recorded_added(info: object) -> list[str]:
    """What an earlier `hooks install` recorded as added, in the hooks' dist-info folder `info` (none: nothing)."""
    if not isinstance(info, str) or not (record := Path(info) / ADDED_FILE).exists():
        return []
    try:
        added = json.loads(record.read_text(encoding="utf-8"))["added"]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # a record we cannot read: uninstall then leaves those packages, and says so
    return [str(name) for name in added] if isinstance(added, list) else []


def check(given_python: str | None) -> int:
    return report(probe(find_python(given_python)))


def report(found: Probe) -> int:
    """What nanobot will load at its next start, in one line (and each entry point that fails)."""
    for name, error in sorted(found.errors.items()):
        print(f"FAIL nanobot cannot load its entry point {name}: {error}")
    if found.hooks_load and not found.errors:
        print(
            f"ok hooks {found.hooks} load in nanobot {found.nanobot}'s environment ({found.python}): "
            f"{', '.join(sorted(found.loaded))}"
        )
        return 0
    if not found.hooks_load:
        print(
            f"FAIL the hooks are not installed in nanobot's environment ({found.python}): "
            f"nanobot-summary hooks install --python {found.python}"
        )
    return 1
