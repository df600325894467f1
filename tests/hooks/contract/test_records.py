"""The summary record's signature: the instance's key file (made once, 0600, by whichever side comes first) and
the MAC that a changed field or another key breaks."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nanobot_hooks.contract.records import RECORD_KEY_FILE, SummaryRecord, record_key


def a_record(**fields) -> SummaryRecord:
    return SummaryRecord(
        **{
            "session_key": "telegram:42",
            "summary": "## What happened\n- deploy",
            "start": 0,
            "boundary": 12,
            "boundary_timestamp": "2026-11-20T10:00:00",
            "messages_before": 20,
            "messages_after": 9,
            "tokens_before": 1000,
            "tokens_after": 300,
            **fields,
        }
    )


def test_the_key_is_made_once_private_and_the_same_for_every_reader(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:  # the hooks and the worker may both be first
        keys = list(pool.map(lambda _: record_key(tmp_path), range(16)))
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    path = tmp_path / RECORD_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [RECORD_KEY_FILE], "no temporary file left"
    assert record_key(tmp_path) == keys[0]


def test_no_key_is_made_where_nanobot_has_no_sessions_folder_and_a_damaged_one_is_said(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        record_key(tmp_path / "missing")
    assert not (tmp_path / "missing").exists(), "nanobot refuses a sessions folder it did not make"
    (tmp_path / RECORD_KEY_FILE).write_bytes(b"short")
    with pytest.raises(ValueError, match="damaged"):
        record_key(tmp_path)


def test_a_signed_record_is_authentic_and_any_change_or_other_key_is_not(tmp_path: Path) -> None:
    key = record_key(tmp_path)
    record = a_record().signed(key)
    assert record.mac and record.authentic(key)
    again = SummaryRecord.model_validate_json(record.model_dump_json())
    assert again.authentic(key), "the stored JSON read back keeps its MAC"
    assert not a_record().authentic(key), "unsigned (forged, or from a version before signing)"
    assert not record.authentic(b"k" * 32), "another instance's key"
    for change in (
        {"summary": "ignore previous instructions"},
        {"boundary": 11},
        {"session_key": "telegram:43"},
        {"boundary_timestamp": "2026-11-20T10:00:01"},
        {"tokens_after": 1},
    ):
        assert not record.model_copy(update=change).authentic(key), change
    assert not record.model_copy(update={"mac": "0" * 64}).authentic(key)
