"""Builds and runs the pure C unit tests of libgpuslice, and checks the built library itself.

Owns: config parser + size grammar (test_config.c), region + accounting incl. concurrent processes
and dead-pid reclaim (test_region.c), the interposed dlsym keeping RTLD_NEXT relative to the caller
(test_dlsym_next.c), the library's NEEDED entries, GLIBC symbol versions and exported symbols.
Needs a C compiler (cc) and cuda.h (the harness's lookup); skips with a reason otherwise, except
under CI, where it must run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from harness import CUDA_INCLUDE

ROOT = Path(__file__).resolve().parents[3]
NATIVE = ROOT / "native"
HERE = Path(__file__).resolve().parent
CUDA_INC = Path(CUDA_INCLUDE)  # the harness's lookup: $CUDA_INCLUDE, $CUDA_HOME, PyPI's header
CC = os.environ.get("CC", "cc")

pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and (shutil.which(CC) is None or not (CUDA_INC / "cuda.h").exists()),
    reason=f"needs a C compiler ({CC}) and {CUDA_INC}/cuda.h",
)
CFLAGS = ["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE / 'src'}",
          f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'include' / 'gpuslice'}", f"-I{CUDA_INC}"]


def _region_sources() -> list[Path]:
    """The CUDA-free part of the library the region tests link (region/, accounting, config)."""
    return [NATIVE / "src" / p for p in ("config.c", "log.c", "mem/account.c")] + sorted(
        (NATIVE / "src" / "region").glob("*.c"))


def _cc(args: list[str], cwd: Path) -> None:
    res = subprocess.run([CC, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"compiling failed:\n{res.stderr}"


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def library() -> Path:
    """native/build/libgpuslice.so, built once by `make -C native` (zig when installed)."""
    res = subprocess.run(["make", "-s", "-C", str(NATIVE)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"make -C native failed:\n{res.stdout}\n{res.stderr}"
    return NATIVE / "build" / "libgpuslice.so"


def test_config_parser_accepts_the_shared_grammar_and_names_every_bad_value(tmp_path: Path) -> None:
    exe = tmp_path / "test_config"
    _cc([*CFLAGS, str(HERE / "test_config.c"), str(NATIVE / "src/config.c"),
         str(NATIVE / "src/log.c"), "-o", str(exe), "-lpthread"], tmp_path)
    res = _run([str(exe)])
    assert res.returncode == 0, f"C config tests failed:\n{res.stdout}{res.stderr}"
    assert "0 failure(s)" in res.stdout, "the test binary must report its result"


def test_region_accounting_never_overcommits_and_reclaims_dead_processes(tmp_path: Path) -> None:
    exe = tmp_path / "test_region"
    srcs = _region_sources()
    _cc([*CFLAGS, str(HERE / "test_region.c"), *map(str, srcs), "-o", str(exe), "-lpthread"],
        tmp_path)
    res = _run([str(exe), str(tmp_path)])
    assert res.returncode == 0, f"C region tests failed:\n{res.stdout}{res.stderr}"
    assert "0 failure(s)" in res.stdout, "the test binary must report its result"


def test_interposed_dlsym_keeps_rtld_next_relative_to_the_caller(tmp_path: Path,
                                                                  library: Path) -> None:
    for which, name in ((1, "libnexta.so"), (2, "libnextb.so")):
        _cc(["-shared", "-fPIC", f"-DGS_WHICH={which}", str(HERE / "dlsym_next_lib.c"), "-o",
             str(tmp_path / name), "-ldl"], tmp_path)
    exe = tmp_path / "test_dlsym_next"
    _cc([str(HERE / "test_dlsym_next.c"), "-o", str(exe), f"-L{tmp_path}", "-Wl,--no-as-needed",
         "-lnexta", "-lnextb", "-ldl", f"-Wl,-rpath,{tmp_path}"], tmp_path)
    fake = NATIVE / "build" / "fake" / "libcuda.so.1"
    args = [str(exe)]
    if not fake.exists():
        subprocess.run(["make", "-s", "-C", str(NATIVE / "fake")], capture_output=True, timeout=300)
    if fake.exists():
        args.append(str(fake))
    env = {**os.environ, "LD_PRELOAD": str(library), "CUDA_DEVICE_MEMORY_LIMIT": "1GiB",
           "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(tmp_path / "region")}
    res = _run(args, env=env)
    assert res.returncode == 0, f"dlsym under libgpuslice misbehaved:\n{res.stdout}{res.stderr}"


def test_library_needs_only_libc_libdl_libpthread(library: Path) -> None:
    out = _run(["readelf", "-d", str(library)]).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    assert needed <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, (
        f"libgpuslice must not link libcuda/libnvidia-ml or anything else (dlopen): {needed}")


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")
def test_library_loads_on_glibc_2_17_when_built_with_zig(library: Path) -> None:
    zig = subprocess.run(["python3", "-c", "import ziglang"], capture_output=True).returncode == 0
    if not zig:
        pytest.skip("ziglang not installed: the build used the host cc, whose glibc is newer")
    out = _run(["objdump", "-T", str(library)]).stdout
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    assert versions and max(versions) <= (2, 17), (
        f"containers with glibc 2.17 must be able to load the library; needs {max(versions)}")


def test_library_exports_only_hooked_symbols_and_dlsym(library: Path) -> None:
    out = _run(["readelf", "--dyn-syms", "-W", str(library)]).stdout
    exported = {f[7].split("@")[0] for f in (line.split() for line in out.splitlines())
                if len(f) >= 8 and f[6] != "UND" and f[4] == "GLOBAL"}
    hooks_def = (NATIVE / "hooks.def").read_text()
    hooked = set(re.findall(r"^HOOK\w*\((\w+),", hooks_def, flags=re.M))
    assert "cuMemAlloc_v2" in hooked and "cuGetProcAddress_v2" in hooked, "hooks.def lost entries"
    assert exported == hooked | {"dlsym"}, (
        f"exports must be exactly hooks.def + dlsym; extra {exported - hooked - {'dlsym'}}, "
        f"missing {hooked - exported}")


def test_python_region_reader_agrees_with_what_the_c_library_writes(tmp_path: Path) -> None:
    from gpuslice.shim import Region

    exe = tmp_path / "region_writer"
    srcs = _region_sources()
    _cc([*CFLAGS, str(HERE / "region_writer.c"), *map(str, srcs), "-o", str(exe), "-lpthread"],
        tmp_path)
    path = tmp_path / "region"
    proc = subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "writer died"
        region = Region.read(path)
        mine = [p for p in region.processes if p.pid == proc.pid]
        assert len(mine) == 1 and mine[0].alive, "the writer's slot is live and found by pid"
        assert mine[0].used[:2] == (3 << 20, 5 << 20), "per-device used bytes at the same offsets"
        assert mine[0].pending[:2] == (0, 1 << 20), "pending bytes at the same offsets"
        assert region.devices[0].limit == 64 << 20 and region.sm_limit == 30, "header mirrored"
        assert region.devices[0].uuid == "GPU-00000000-1111-2222-3333-444444444440", "UUID field"
        assert region.by_uuid()["GPU-00000000-1111-2222-3333-444444444441"].used == 5 << 20
        assert region.devices[1].used == 5 << 20 and region.devices[1].pending == 1 << 20
    finally:
        proc.communicate(timeout=10)
    assert proc.returncode == 0, "writer exits cleanly once stdin closes"
    assert Region.read(path).processes == (), "a normal exit releases the slot"
