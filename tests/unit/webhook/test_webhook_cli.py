"""`gpuslice webhook` and `gpuslice certgen` as a user meets them: listed in --help, errors as
one `gpuslice: error:` line with the right exit code, certgen idempotent from the command line."""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner

from gpuslice.cli import main


@pytest.fixture(autouse=True)
def _keep_root_logger():
    """`gpuslice webhook` configures the root logger; later tests must not inherit that."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_both_commands_are_listed_in_help():
    output = CliRunner().invoke(main, ["--help"]).output
    assert "  webhook " in output and "  certgen " in output


def test_certgen_makes_a_set_once_then_keeps_it(tmp_path):
    args = ["certgen", "--out-dir", str(tmp_path), "--ip", "127.0.0.1"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        "made a new certificate for gpuslice-webhook.gpuslice-system.svc: no certificate yet",
        f"{tmp_path}: wrote ca.crt, ca.key, tls.crt, tls.key"]
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0 and second.stdout.splitlines()[1] == f"{tmp_path}: unchanged"


def test_certgen_with_a_bad_address_is_one_error_line_and_exit_1(tmp_path):
    result = CliRunner().invoke(main, ["certgen", "--out-dir", str(tmp_path), "--ip", "1.2.3"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "gpuslice: error: --ip: '1.2.3' does not appear to be an IPv4 or IPv6 address; "
        "give IPv4 or IPv6 addresses"]


def test_certgen_without_a_destination_says_where_to_write():
    result = CliRunner().invoke(main, ["certgen"])
    assert result.exit_code == 1 and "pass --out-dir DIR and/or --secret NAME" in result.stderr


def test_webhook_without_a_certificate_exits_3_saying_how_to_make_one(tmp_path):
    result = CliRunner().invoke(main, ["webhook", "--cert-file", str(tmp_path / "x.crt"),
                                       "--key-file", str(tmp_path / "x.key")])
    assert result.exit_code == 3
    assert "create them with `gpuslice certgen`" in result.stderr


def test_webhook_with_a_bad_config_file_exits_1_naming_the_key(tmp_path):
    path = tmp_path / "webhook.yaml"
    path.write_text("schedulerNmae: x\n")
    result = CliRunner().invoke(main, ["webhook", "--config", str(path)])
    assert result.exit_code == 1
    assert f"config {path}: has unknown field `schedulerNmae`" in result.stderr
