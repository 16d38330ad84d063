"""The native pieces build cleanly: libgpuslice (`make -C native`), the fake driver
(`make -C native/fake`, -Wall -Wextra -Werror) and the probe programs. Failures show the compiler
output. The fake's exports are checked so that a broken fake cannot make library tests pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness import CUDA_INCLUDE, NATIVE, Binaries


def test_library_fake_driver_and_probes_build_without_warnings(binaries: Binaries) -> None:
    for name in (
        "probe",
        "probe_ptsz",
        "probe_dl",
        "fake_smi",
        "fake_smi_linked",
        "rtld_next_main",
    ):
        assert binaries[name].is_file(), f"{name} was not built"
    assert binaries.lib.is_file()


def test_fake_driver_exports_every_abi_variant_the_library_hooks(binaries: Binaries) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(binaries.fake_dir / "libcuda.so.1")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    lib = subprocess.run(
        ["nm", "-D", "--defined-only", str(binaries.lib)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    hooked = {line.split()[-1] for line in lib.splitlines() if line.split()[-1].startswith("cu")}
    missing = sorted(hooked - exported)
    assert not missing, f"the fake lacks driver functions libgpuslice hooks: {missing}"


def _cuda_headers(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """native/cuda_headers.py (the rule of setup.py, the Makefiles and the harness) under env."""
    clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_INCLUDE")}
    return subprocess.run([sys.executable, str(NATIVE / "cuda_headers.py")], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def test_cuda_h_comes_from_the_toolkit_asked_for_else_from_pypi(tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda" / "include"
    toolkit.mkdir(parents=True)
    (toolkit / "cuda.h").write_text("/* a toolkit's */\n")
    pypi = _cuda_headers({"CUDA_HOME": "/nonexistent"})
    assert pypi.returncode == 0, pypi.stderr  # the dev extra installs nvidia-cuda-runtime
    assert (Path(pypi.stdout.strip()) / "cuda.h").is_file()
    assert Path(pypi.stdout.strip()).name == "include"
    home = _cuda_headers({"CUDA_HOME": str(tmp_path / "cuda")})
    assert home.stdout.strip() == str(toolkit), "a toolkit's headers take precedence"
    given = _cuda_headers({"CUDA_INCLUDE": str(toolkit), "CUDA_HOME": "/nonexistent"})
    assert given.stdout.strip() == str(toolkit)
    wrong = _cuda_headers({"CUDA_INCLUDE": str(tmp_path)})  # asked for, not there: no fallback
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == f"no CUDA headers: {tmp_path}/cuda.h not found ($CUDA_INCLUDE)"


def test_the_library_under_test_is_compiled_with_the_headers_the_harness_found(
        binaries: Binaries) -> None:
    stamp = (binaries.lib.parent / "compiler.txt").read_text()  # native/Makefile's compiler line
    assert f"-I{CUDA_INCLUDE} " in stamp + " "
    assert "-Wall -Wextra -Werror" in stamp  # and no warning from that header: the build passed
