"""The `gpuslice` entry point: version, help, and the one-line error contract."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

import gpuslice
from gpuslice.cli import main


def test_public_api_is_pinned() -> None:
    assert gpuslice.__all__ == ["__version__"], "changing the public API needs a deliberate edit"


def test_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"gpuslice, version {gpuslice.__version__}"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("simulate", "run", "top", "shim"):
        assert f"  {command} " in result.output, f"{command} must be discoverable from --help"


def test_console_script_runs_as_a_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from gpuslice.cli import main; main()", "--version"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "gpuslice, version" in out.stdout


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2
