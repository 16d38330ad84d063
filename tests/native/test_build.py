"""The native pieces build cleanly: libgpuslice (`make -C native`), the fake driver
(`make -C native/fake`, -Wall -Wextra -Werror) and the probe programs. Failures show the compiler
output. The fake's exports are checked so that a broken fake cannot make library tests pass."""

from __future__ import annotations

import subprocess

from harness import Binaries


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
