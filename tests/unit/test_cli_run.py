"""`gpuslice run` and `top` say what is wrong before anything runs: no NVIDIA driver (exit 3 unless
--allow-uncapped), a --region in a missing directory, a missing program (127), bare-number MiB
and absurdly small caps; signals reach the command and the temporary region goes away.
The driver-present path runs on the fake driver (native/build/fake) when it is built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuslice import shim
from gpuslice.cli import main

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "native" / "build" / "fake"
LIB = REPO / "native" / "build" / "libgpuslice.so"
GPUSLICE = [sys.executable, "-c", "import sys; from gpuslice.cli import main; sys.exit(main())"]


def invoke(*args: str) -> tuple[int, list[str], str]:
    """Exit code, stderr lines and stdout of `gpuslice ARGS` in-process."""
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr.splitlines(), result.stdout


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "driver_problem", lambda: "libcuda.so.1: cannot open shared object")


def test_run_without_a_driver_refuses_in_one_line_with_exit_3(no_driver: None,
                                                              tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    code, err, _ = invoke("run", "--gpu-memory", "4GiB", "--", "touch", str(ran))
    assert code == 3
    assert len(err) == 1 and err[0].startswith("gpuslice: error: no NVIDIA driver found"), err
    assert "nothing would be capped" in err[0] and "--allow-uncapped" in err[0]
    assert not ran.exists(), "the command must not run uncapped unless asked"


def test_allow_uncapped_runs_the_command_with_a_warning_and_its_status(no_driver: None) -> None:
    code, err, _ = invoke("run", "--allow-uncapped", "--", "sh", "-c", "exit 5")
    assert code == 5
    assert err == ["gpuslice: warning: no NVIDIA driver found (libcuda.so.1 not loadable): "
                   "running the command uncapped, as --allow-uncapped asks"]


@pytest.mark.skipif(shim.driver_problem() is None, reason="this machine has an NVIDIA driver")
def test_run_on_a_machine_without_a_driver_exits_3_as_a_real_process() -> None:
    proc = subprocess.run([*GPUSLICE, "run", "--", "true"],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "LD_LIBRARY_PATH": ""})
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("gpuslice: error: no NVIDIA driver found") == 1, proc.stderr


def test_region_in_a_missing_directory_is_an_error_before_the_command_starts(
        tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    code, err, _ = invoke("run", "--allow-uncapped", "--region", str(tmp_path / "no" / "r"),
                          "--", "touch", str(ran))
    assert code == 1
    assert err == [f"gpuslice: error: --region {tmp_path}/no/r: directory {tmp_path}/no does "
                   "not exist; create it first or choose a path in an existing directory"]
    assert not ran.exists()


def test_region_that_is_another_programs_file_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x" * 5000)
    code, err, _ = invoke("run", "--allow-uncapped", "--region", str(other), "--", "true")
    assert code == 3 and len(err) == 1 and "not a gpuslice region" in err[0], err


def test_a_missing_program_exits_127_like_a_shell() -> None:
    code, err, _ = invoke("run", "--", "no-such-program-h11")
    assert code == 127
    assert err == ["gpuslice: error: command not found: no-such-program-h11; check PATH or give "
                   "a full path"]


def test_a_program_that_cannot_be_executed_exits_126_like_a_shell(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n")  # no x bit
    code, err, _ = invoke("run", "--allow-uncapped", "--", str(script))
    assert code == 126
    assert err == [f"gpuslice: error: {script}: not an executable file; check the path, or "
                   f"`chmod +x {script}`"]


def test_top_on_a_missing_region_explains_when_regions_appear(tmp_path: Path) -> None:
    code, err, _ = invoke("top", "--once", "--region", str(tmp_path / "job.region"))
    assert code == 3 and len(err) == 1, err
    assert "appears at the first CUDA call of a process under libgpuslice" in err[0]


@pytest.mark.parametrize(("text", "mib"), [("4096", 4096), ("64", 64), ("4GiB", 4096),
                                           ("512m", 512), (" 8192 ", 8192)])
def test_a_bare_gpu_memory_number_is_mib(text: str, mib: int) -> None:
    assert shim._parse_memory(text) == mib << 20


@pytest.mark.parametrize("text", ["16", "1m", "63MiB", "1024k"])
def test_an_absurdly_small_cap_warns(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    shim._parse_memory(text)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpuslice: warning: --gpu-memory {text} caps"), err
    assert "below 64 MiB" in err[0]


@pytest.mark.parametrize("text", ["9" * 5000, "1" * 5000 + "GiB", "0" * 5000 + "4096"])
def test_a_gpu_memory_of_thousands_of_digits_is_one_short_line(text: str) -> None:
    code, err, _ = invoke("run", "--allow-uncapped", "--gpu-memory", text, "--", "true")
    if text.startswith("0"):  # leading zeros: 4096 MiB, fine
        assert code == 0
        return
    assert code == 1 and len(err) == 1 and len(err[0]) < 300, err


def test_a_byte_count_given_as_a_bare_number_is_caught_as_a_unit_mix_up() -> None:
    code, err, _ = invoke("run", "--gpu-memory", "4294967296", "--", "true")
    assert code == 1 and len(err) == 1, err
    assert "a bare number is MiB" in err[0] and '"4096" if you meant MiB' in err[0]


def test_an_install_without_the_library_says_why_it_was_not_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "_native").mkdir()
    (tmp_path / "_native" / "NOT-BUILT.txt").write_text("no `cc` on PATH\n")
    monkeypatch.setattr(shim, "__file__", str(tmp_path / "shim.py"))
    monkeypatch.delenv("GPUSLICE_LIBRARY", raising=False)
    code, err, _ = invoke("shim", "--path")
    assert code == 3
    assert err == ["gpuslice: error: libgpuslice.so was not built when gpuslice was installed (no "
                   "`cc` on PATH); build it with `make -C native` (a C compiler; cuda.h from "
                   "$CUDA_HOME or `pip install nvidia-cuda-runtime`) in a checkout and reinstall, "
                   "or set GPUSLICE_LIBRARY to the built file"]


def _fake_env() -> dict[str, str]:
    if not (FAKE / "libcuda.so.1").is_file() or not LIB.is_file():
        pytest.skip("needs native/build (run the native tests or `make -C native/fake`)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "GPUSLICE_"))}
    return {**env, "LD_LIBRARY_PATH": str(FAKE), "PYTHONPATH": str(REPO / "src")}


def _gpuslice(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([*GPUSLICE, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_with_a_driver_the_bare_number_reaches_the_library_in_bytes() -> None:
    proc = _gpuslice("run", "--gpu-memory", "4096", "--", "sh", "-c",
                     'echo "$CUDA_DEVICE_MEMORY_LIMIT"', env=_fake_env())
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == str(4096 << 20)


# Prints its region path, then exits 42 when SIGTERM/SIGINT arrives.
_WAITER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
signal.signal(signal.SIGINT, lambda *_: sys.exit(43))
print(os.environ["CUDA_DEVICE_MEMORY_SHARED_CACHE"], flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 42), (signal.SIGINT, 43)])
def test_a_signal_to_gpuslice_run_reaches_the_command_and_the_temporary_region_goes(
        sig: signal.Signals, status: int) -> None:
    proc = _gpuslice("run", "--gpu-memory", "1GiB", "--", sys.executable, "-c", _WAITER,
                     env=_fake_env())
    assert proc.stdout is not None
    region = Path(proc.stdout.readline().strip())
    assert region.parent.is_dir(), "the temporary region's directory exists while it runs"
    proc.send_signal(sig)  # gpuslice's handlers are in before it starts the command
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == status, f"the command's own status comes back\n{err}"
    assert not region.parent.exists(), "the temporary region is removed"
