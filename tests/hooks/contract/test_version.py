"""The version handshake's decision (pure): what a difference between the hooks' and the worker's versions means,
and which command fixes it; and what a record says of its writer's versions."""

from __future__ import annotations

import pytest

from nanobot_hooks.contract.version import (
    BEFORE_CONTRACT,
    CONTRACT,
    HOOKS_INSTALL,
    RELEASE,
    release_order,
    version_mismatch,
    versions_of,
)

UPGRADE_WORKER = "upgrade the worker to"


def test_the_same_versions_are_no_mismatch() -> None:
    assert version_mismatch((RELEASE, CONTRACT), (RELEASE, CONTRACT)) is None
    assert version_mismatch(("0.3.1", 2), ("0.3.1", 2)) is None


@pytest.mark.parametrize(
    ("hooks", "worker", "fix"),
    [
        (("0.2.0", 1), ("0.3.0", 2), HOOKS_INSTALL),  # the hooks older: the hooks of the worker's version
        (("0.3.0", 2), ("0.2.0", 1), f"{UPGRADE_WORKER} 0.3.0"),  # the worker older: upgrade it to the hooks'
        (("0.1.0", BEFORE_CONTRACT), ("0.2.0", 1), HOOKS_INSTALL),  # hooks from before the contract had a number
        (("", BEFORE_CONTRACT), ("0.2.0", 1), HOOKS_INSTALL),  # hooks that do not say: older
        (("0.2.0", 1), ("", BEFORE_CONTRACT), f"{UPGRADE_WORKER} 0.2.0"),  # a worker that does not say: older
        (("0.10.0", 2), ("0.9.0", 1), f"{UPGRADE_WORKER} 0.10.0"),  # ordered by number, not as text
    ],
)
def test_another_contract_is_serious_and_the_older_side_is_moved(hooks, worker, fix) -> None:
    mismatch = version_mismatch(hooks, worker)
    assert mismatch is not None and mismatch.serious
    assert mismatch.fix.startswith(fix), mismatch.fix
    assert "different contracts" in mismatch.what
    for release, contract in (hooks, worker):
        said = f"contract {contract}" if contract != BEFORE_CONTRACT else "no contract number: before 0.2.0"
        assert f"{release or 'of an unknown version'} ({said})" in mismatch.what, mismatch.what
    assert "\n" not in mismatch.line and mismatch.line == f"{mismatch.what}; fix: {mismatch.fix}"


def test_another_release_of_the_same_contract_is_a_notice_with_the_same_fixes() -> None:
    newer_worker = version_mismatch(("0.2.0", 1), ("0.2.1", 1))
    assert newer_worker is not None and not newer_worker.serious
    assert "0.2.0" in newer_worker.what and "0.2.1" in newer_worker.what and "work together" in newer_worker.what
    assert newer_worker.fix == f"{HOOKS_INSTALL}, then restart nanobot"
    newer_hooks = version_mismatch(("0.2.1", 1), ("0.2.0", 1))
    assert newer_hooks is not None and not newer_hooks.serious and newer_hooks.fix.startswith(f"{UPGRADE_WORKER} 0.2.1")


def test_the_install_command_can_be_named_with_its_python() -> None:
    mismatch = version_mismatch(("0.1.0", 0), ("0.2.0", 1), install=f"{HOOKS_INSTALL} --python /opt/nb/bin/python")
    assert mismatch is not None and mismatch.fix == f"{HOOKS_INSTALL} --python /opt/nb/bin/python, then restart nanobot"


def test_a_record_says_its_writers_versions_and_one_of_another_version_is_read_tolerantly() -> None:
    assert versions_of({"version": "0.2.0", "contract": 1, "host": "h"}) == ("0.2.0", 1)
    assert versions_of({"version": "0.1.0"}) == ("0.1.0", BEFORE_CONTRACT), "before 0.2.0: no contract"
    assert versions_of({}) == ("", BEFORE_CONTRACT)
    assert versions_of({"version": 3, "contract": "1"}) == ("", BEFORE_CONTRACT), "not ours: not guessed"
    assert versions_of({"version": "0.2.0", "contract": True}) == ("0.2.0", BEFORE_CONTRACT)


def test_releases_order_by_their_numbers() -> None:
    assert release_order("0.2.0") == (0, 2, 0) and release_order("0.10.1rc1") == (0, 10, 1)
    assert release_order("") is None and release_order("dev") is None
    assert release_order("0.10.0") > release_order("0.9.9")  # type: ignore[operator]
