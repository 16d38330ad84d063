"""ReloadingTLS: loads at start or says how to get certificates; reloads on change; a bad pair
keeps the previous certificate serving and is retried."""

from __future__ import annotations

import datetime as dt
import logging
import os

import pytest

from gpuslice.errors import EnvironmentProblem
from gpuslice.webhook.certs import ensure
from gpuslice.webhook.tls import ReloadingTLS


def write(tmp_path, bundle, *, key=None):
    (tmp_path / "tls.crt").write_bytes(bundle.cert)
    (tmp_path / "tls.key").write_bytes(key if key is not None else bundle.key)
    return str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")


def test_missing_files_at_start_say_how_to_get_them(tmp_path):
    with pytest.raises(EnvironmentProblem, match="create them with `gpuslice certgen`"):
        ReloadingTLS(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


def test_a_key_that_does_not_match_at_start_is_refused(tmp_path):
    a, _ = ensure(None, ["a"])
    b, _ = ensure(None, ["b"])
    with pytest.raises(EnvironmentProblem, match=r"KEY_VALUES_MISMATCH|key values mismatch"):
        ReloadingTLS(*write(tmp_path, a, key=b.key))


def test_changed_files_are_loaded_and_unchanged_ones_are_not(tmp_path, caplog):
    first, _ = ensure(None, ["a"], days=10)
    tls = ReloadingTLS(*write(tmp_path, first))
    assert tls.reload_if_changed() is False and tls.reloads == 0
    start = tls.not_after
    second, _ = ensure(None, ["a"], days=20)
    write(tmp_path, second, key=first.key)  # half-way through an update: new cert, old key
    with caplog.at_level(logging.WARNING):
        assert tls.reload_if_changed() is False
    assert "still serving the previous certificate" in caplog.text
    assert tls.not_after == start
    write(tmp_path, second)
    assert tls.reload_if_changed() is True and tls.reloads == 1
    assert tls.not_after - start == pytest.approx(dt.timedelta(days=10).total_seconds(), abs=5)


def test_a_swapped_symlink_counts_as_a_change(tmp_path):
    """A Secret volume updates by pointing ..data at a new directory."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    a, _ = ensure(None, ["a"], days=10)
    b, _ = ensure(None, ["a"], days=20)
    write(one, a)
    write(two, b)
    (tmp_path / "data").symlink_to(one)
    tls = ReloadingTLS(str(tmp_path / "data" / "tls.crt"), str(tmp_path / "data" / "tls.key"))
    os.symlink(two, tmp_path / "data.new")
    os.replace(tmp_path / "data.new", tmp_path / "data")
    assert tls.reload_if_changed() is True
