"""The wheels an installed worker carries for `hooks install`.

The hooks of its own version and the packages they need, rebuilt from the distributions already installed in the
worker's own environment, so the hooks go into nanobot's environment with no package index at all (pip --no-index
--find-links)."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import importlib.util
import io
import re
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

# What a dist-info folder keeps that a wheel's carries too; RECORD and WHEEL are written anew, the rest is pip's
# (INSTALLER, REQUESTED, direct_url.json) and describes one install, not the distribution.
KEPT_INFO = {"METADATA", "entry_points.txt", "top_level.txt"}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class NoWheelError(Exception):
    """A distribution the worker cannot carry: not installed in its environment, or without its files listed."""


def carried_wheels(root: str, out: Path, skip: Iterable[str] = ()) -> list[Path]:
    """Wheels of distribution `root` and every distribution it needs, written to `out`.

    Wheels of distribution `root` and every distribution it needs (its extras' too, markers as in this Python), as
    installed in this environment, written to `out`; `skip`: names not to carry (what nanobot already holds). Raises
    NoWheelError when `root` itself is not installed here."""
    skipped = {canon(name) for name in skip}
    built: list[Path] = []
    for dist in closure(root, skipped):
        built.append(wheel_of(dist, out))
    return built


def closure(root: str, skipped: set[str]) -> Iterator[metadata.Distribution]:
    """`root`'s distribution and those it requires, transitively, each once.

    The ones not installed here, or in `skipped`, are left out (pip then says which one it misses)."""
    try:
        first = metadata.distribution(root)
    except metadata.PackageNotFoundError as exc:
        raise NoWheelError(f"{root} is not installed in this worker's environment") from exc
    extras_of: dict[str, set[str]] = {canon(root): set()}
    done: set[str] = set()
    todo = [first]
    while todo:
        dist = todo.pop()
        name = canon(dist.metadata["Name"])
        if name not in done:
            done.add(name)
            yield dist
        for requirement in requirements(dist, frozenset(extras_of.get(name, set()))):
            wanted = canon(requirement.name)
            if wanted in skipped or (wanted in extras_of and set(requirement.extras) <= extras_of[wanted]):
                continue  # carried already with these extras (a name met again with new extras: its needs again)
            extras_of.setdefault(wanted, set()).update(requirement.extras)
            try:
                todo.append(metadata.distribution(requirement.name))
            except metadata.PackageNotFoundError:
                continue


def requirements(dist: metadata.Distribution, extras: frozenset[str]) -> list[Requirement]:
    """What `dist` requires in this Python with `extras` asked for (a requirement whose marker is false: left)."""
    found = []
    for line in dist.requires or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in (extras or {""})):
            found.append(requirement)
    return found


def wheel_of(dist: metadata.Distribution, out: Path) -> Path:
    """A wheel of an installed distribution.

    Its files as installed (an editable install: its packages where they are imported from), its metadata and entry
    points, and the tags its install recorded (`py3-none-any` when none were): pip installs it as it would the original
    wheel."""
    name, version = dist.metadata["Name"], dist.version
    info = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    tags = recorded_tags(dist) or ["py3-none-any"]
    path = out / f"{re.sub(r'[-_.]+', '_', name)}-{version}-{compressed(tags)}.whl"
    entries: dict[str, bytes] = {}
    for relative, file in installed_files(dist):
        entries[relative] = file.read_bytes()
    if not entries:
        raise NoWheelError(f"{name} {version} lists no files of its own in this worker's environment")
    for kept in sorted(KEPT_INFO):
        text = dist.read_text(kept)
        if text is not None:
            entries[f"{info}/{kept}"] = text.encode("utf-8")
    pure = "true" if all(tag.endswith("-none-any") for tag in tags) else "false"
    entries[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: nanobot-summary\nRoot-Is-Purelib: "
        f"{pure}\n" + "".join(f"Tag: {tag}\n" for tag in tags)
    ).encode("utf-8")
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for relative, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        writer.writerow([relative, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries[f"{info}/RECORD"] = record.getvalue().encode("utf-8")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for relative, data in entries.items():
            wheel.writestr(relative, data)
    return path


def compressed(tags: list[str]) -> str:
    """A wheel file name's tag part for these tags (PEP 425's compressed tag set: `cp311-cp311-a.b`)."""
    parts = [tag.split("-") for tag in tags]
    return "-".join(".".join(dict.fromkeys(part[i] for part in parts)) for i in range(3))


def recorded_tags(dist: metadata.Distribution) -> list[str]:
    """The tags in the installed dist-info's WHEEL file (pip keeps the original wheel's)."""
    text = dist.read_text("WHEEL") or ""
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def installed_files(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    """(path in the wheel, file) of what the distribution installed into site-packages.

    Compiled caches, its dist-info and files outside site-packages (console scripts: pip writes them again from
    entry_points.txt) left out. An editable install lists a finder, not its packages: then the packages are read where
    Python imports them from."""
    listed = [file for file in dist.files or [] if not skipped_file(file.parts)]
    if any(file.parts[0].startswith("__editable__") for file in listed) or not listed:
        return list(editable_files(dist))
    return [(file.as_posix(), Path(str(file.locate()))) for file in listed if Path(str(file.locate())).is_file()]


def skipped_file(parts: tuple[str, ...]) -> bool:
    return (
        not parts
        or parts[0] == ".."
        or parts[0].endswith((".dist-info", ".egg-info"))
        or "__pycache__" in parts
        or parts[-1].endswith((".pyc", ".pth"))
    )


def editable_files(dist: metadata.Distribution) -> Iterator[tuple[str, Path]]:
    """The packages of an editable install, from where they are imported.

    Its top_level.txt, else the packages its entry points name, else its own name."""
    names = (
        (dist.read_text("top_level.txt") or "").split()
        or sorted({entry.value.split(".")[0].split(":")[0] for entry in dist.entry_points})
        or [re.sub(r"[-.]+", "_", dist.metadata["Name"])]
    )
    for top in names:
        spec = importlib.util.find_spec(top)
        if spec is None:
            continue
        for folder in spec.submodule_search_locations or []:
            base = Path(folder)
            for file in sorted(base.rglob("*")):
                relative = file.relative_to(base.parent)
                if file.is_file() and not skipped_file(relative.parts):
                    yield relative.as_posix(), file
        if not spec.submodule_search_locations and spec.origin:
            yield Path(spec.origin).name, Path(spec.origin)
