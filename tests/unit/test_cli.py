"""The `gpuslice` entry point: version, help, and the one-line error contract."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

import gpuslice
from gpuslice.cli import main
from gpuslice.errors import EnvironmentProblem, RequestError


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


@pytest.mark.parametrize(("args", "says"), [
    (["run", "--gpu-compute", "150", "--", "true"],
     "invalid value for '--gpu-compute': 150 is not in the range 0<=x<=100; "
     "see `gpuslice run --help`"),
    (["run", "--compute-mode", "soft", "--", "true"], "invalid value for '--compute-mode'"),
    (["run"], "missing argument 'COMMAND...'; see `gpuslice run --help`"),
    (["simulate", "--trace", "t.jsonl"], "missing option '--cluster'"),
    (["no-such-command"], "no such command 'no-such-command'; see `gpuslice --help`"),
    (["top", "--no-such-flag"], "no such option '--no-such-flag'"),
    (["run", "--gpu-compute", "9" * 5000, "--", "true"],
     "invalid value for '--gpu-compute': '" + "9" * 60 + "...' is not a valid integer"),
])
def test_every_usage_error_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuslice: error: "), lines
    assert says in lines[0]


def test_bare_gpuslice_prints_the_help() -> None:
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 2
    assert "Usage: gpuslice" in result.output and "gpuslice: error" not in result.output


def test_a_problem_of_several_lines_prints_each_as_an_error_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(**_: object) -> None:
        raise RequestError(["container \"a\": first; fix a", "container \"b\": second; fix b"])

    monkeypatch.setattr("gpuslice.simulate.command.run", fail)
    result = CliRunner().invoke(main, ["simulate", "--cluster", "c", "--trace", "t"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["gpuslice: error: container \"a\": first; fix a",
                                          "gpuslice: error: container \"b\": second; fix b"]


def test_environment_problems_exit_3_and_debug_shows_the_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(**_: object) -> None:
        raise EnvironmentProblem("no kubelet socket at /x; check the mount")

    monkeypatch.setattr("gpuslice.simulate.command.run", fail)
    result = CliRunner().invoke(main, ["simulate", "--cluster", "c", "--trace", "t"])
    assert (result.exit_code, result.stderr) == (
        3, "gpuslice: error: no kubelet socket at /x; check the mount\n")
    result = CliRunner().invoke(main, ["--debug", "simulate", "--cluster", "c", "--trace", "t"])
    assert isinstance(result.exception, EnvironmentProblem)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("gpuslice.simulate.command.run", interrupted)
    result = CliRunner().invoke(main, ["simulate", "--cluster", "c", "--trace", "t"])
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == "gpuslice: error: interrupted"
