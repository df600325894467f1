"""The project's version, the contract's, and the handshake between hooks and worker.

The one version of this project (the hooks and the worker are released together), the version of the contract between
them (records, keys, session marker, recall index), and the handshake: what each side's record in Redis says of its
versions, what a difference between hooks and worker means and what fixes it (`version_mismatch`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
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
]

RELEASE = "0.2.0"
CONTRACT = 1

# The fields that carry the writer's RELEASE and CONTRACT in a worker's health record (`Keys.worker`, written at
# every beat by worker/state/workers.py) and in a nanobot's hooks record (`Keys.hooks`, turn/listener.py).
RELEASE_FIELD = "version"
CONTRACT_FIELD = "contract"
# The contract of a record that names none: written before 0.2.0, when the contract had no number.
BEFORE_CONTRACT = 0
# What puts the hooks of the worker's version into nanobot's environment.
HOOKS_INSTALL = "nanobot-summary hooks install"


@dataclass(frozen=True)
class Mismatch:
    """Hooks and worker of different versions.

    `serious`: their contracts differ, so a record, a job or a key one side writes may not be understood by the other;
    else a notice (another release of the same contract works)."""

    serious: bool
    what: str  # both versions, and what the difference means
    fix: str  # the command or step that fixes it

    @property
    def line(self) -> str:
        return f"{self.what}; fix: {self.fix}"


def versions_of(record: Mapping[str, Any]) -> tuple[str, int]:
    """(release, contract) a record says of its writer.

    "" for a release it does not name, BEFORE_CONTRACT for a contract it does not name (or names as something other than
    a number)."""
    release, contract = record.get(RELEASE_FIELD), record.get(CONTRACT_FIELD)
    return (
        release if isinstance(release, str) else "",
        contract if isinstance(contract, int) and not isinstance(contract, bool) else BEFORE_CONTRACT,
    )


def release_order(release: str) -> tuple[int, ...] | None:
    """A release's numbers for ordering ("0.2.0" -> (0, 2, 0), "0.10.1rc1" -> (0, 10, 1)).

    None when it starts with none (unknown)."""
    found = re.match(r"\d+(?:\.\d+)*", release.strip())
    return tuple(int(part) for part in found.group(0).split(".")) if found else None


def _named(side: str, release: str, contract: int) -> str:
    """A side's release and contract, in words.

    E.g. "the worker 0.2.0 (contract 1)", "nanobot's hooks of an unknown version (no contract number: before 0.2.0)"."""
    numbered = f"contract {contract}" if contract != BEFORE_CONTRACT else "no contract number: before 0.2.0"
    return f"{side} {release or 'of an unknown version'} ({numbered})"


def version_mismatch(hooks: tuple[str, int], worker: tuple[str, int], install: str = HOOKS_INSTALL) -> Mismatch | None:
    """What differs between the hooks' (release, contract) and the worker's, and what fixes it.

    None when both are the same. The fix moves the older side to the newer one's version: hooks older (or of an unknown
    version) -> `install` (the hooks of the worker's version), then restart nanobot, which loads its hooks at its start;
    worker older -> upgrade the worker to the hooks' release. A release that cannot be ordered counts as the older."""
    (hooks_release, hooks_contract), (worker_release, worker_contract) = hooks, worker
    if hooks_contract == worker_contract and hooks_release == worker_release:
        return None
    hooks_side = _named("nanobot's hooks", hooks_release, hooks_contract)
    named = f"{hooks_side} and {_named('the worker', worker_release, worker_contract)}"
    hooks_order, worker_order = release_order(hooks_release), release_order(worker_release)
    if hooks_order is not None and (worker_order is None or worker_order < hooks_order):
        fix = f"upgrade the worker to {hooks_release} and restart it (docs/operations.md, Upgrading)"
    else:
        fix = f"{install}, then restart nanobot"
    if hooks_contract != worker_contract:
        return Mismatch(
            True,
            f"{named} speak different contracts: summaries, jobs and records between them may "
            "be refused or left waiting",
            fix,
        )
    return Mismatch(False, f"{named} are different releases of the same contract: they work together", fix)
