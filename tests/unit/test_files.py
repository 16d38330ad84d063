"""files.write_atomic: the old file or the new one, whatever happens during the write."""

from __future__ import annotations

import os
import stat

import pytest

from gpuslice import files


def test_it_replaces_the_file_with_the_mode_asked_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "sub" / "journal.json"
    files.write_atomic(target, b"old", 0o600)
    files.write_atomic(target, b"new", 0o600, durable=False)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["journal.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path, monkeypatch):
    target = tmp_path / "journal.json"
    files.write_atomic(target, b"old")

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.os, "write", no_space)
    with pytest.raises(OSError, match="No space"):
        files.write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["journal.json"]


def test_a_link_planted_where_the_temporary_goes_is_not_followed(tmp_path, monkeypatch):
    target, elsewhere = tmp_path / "journal.json", tmp_path / "elsewhere"
    elsewhere.write_bytes(b"keep")
    monkeypatch.setattr(files.uuidlib, "uuid4", lambda: type("U", (), {"hex": "x"})())
    (tmp_path / ".journal.json.x.tmp").symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        files.write_atomic(target, b"new")
    assert elsewhere.read_bytes() == b"keep"
