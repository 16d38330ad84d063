"""Harness for the native tests: builds libgpuslice, the fake driver and the probe programs, and
runs them with LD_PRELOAD against the fake (LD_LIBRARY_PATH), parsing their one-line results.
Owns: build orchestration for tests (one flock'ed build per session), env composition, output
parsing, and a reader of the fake driver's state file (its own accounting, native/fake/fake.h).
Does not: judge results (the test files do) or read the gpuslice region (gpuslice.shim.Region does).
Failure: a build error fails the test with the compiler output; nothing is ever skipped here (the
`binaries` fixture skips where cannot_build() gives a reason, and fails on it under CI=true).
Tests: tests/native/test_*.py (this module is their only entry to the binaries)."""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import queue
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
# GPUSLICE_SANITIZE=asan|tsan: test the library and fake driver built with sanitizers
# (native/sanitize.mk, `make -C native check-asan`), the sanitizer runtime preloaded first.
SANITIZE = os.environ.get("GPUSLICE_SANITIZE", "")
BUILD = NATIVE / "build" / SANITIZE if SANITIZE else NATIVE / "build"
LIB = BUILD / "libgpuslice.so"
FAKE_DIR = BUILD / "fake"
_SAN_ENV = {
    # verify_asan_link_order=0: `gpuslice run` puts the library ahead of the runtime it NEEDs
    "ASAN_OPTIONS": "detect_leaks=0:exitcode=86:verify_asan_link_order=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    "TSAN_OPTIONS": "halt_on_error=1:exitcode=86",
}
_SAN_REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "WARNING: ThreadSanitizer")
PROGS = Path(__file__).resolve().parent / "progs"


def _cuda_headers() -> tuple[Path | None, str]:
    """native/cuda_headers.py's answer (the rule of setup.py and the Makefiles): $CUDA_INCLUDE,
    else $CUDA_HOME/include where it holds cuda.h, else the pip-installed nvidia-cuda-runtime's
    (the dev extra installs it). Loaded by path: native/ is no package."""
    spec = importlib.util.spec_from_file_location("_gpuslice_cuda_headers",
                                                  NATIVE / "cuda_headers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find()


# The directory of cuda.h, passed to make and cc explicitly: the Makefiles' own lookup asks the
# `python3` on PATH, which need not be the environment running the tests. Without headers, the
# toolkit's default place (no cuda.h there; cannot_build() says why).
_CUDA_FOUND, _NO_CUDA = _cuda_headers()
CUDA_INCLUDE = str(_CUDA_FOUND or "/usr/local/cuda/include")

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GRANULE = 2 * MiB  # cuMemAlloc granularity the library documents (and the fake charges)
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY = 0, 1, 2
CUDA_ERROR_NOT_FOUND = 500

_ENV_PREFIXES = ("CUDA_", "LIBCUDA_", "FAKE_CUDA_", "GPUSLICE_", "LD_PRELOAD", "NVIDIA_")


@functools.cache
def _sanitizer_runtime() -> str:
    """Path of the compiler's lib<asan|tsan>.so, which must be the first library a process loads."""
    name = f"lib{SANITIZE}.so"
    cc = os.environ.get("CC", "cc")
    res = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    return res.stdout.strip() or name


class BuildError(Exception):
    """A make or cc step failed; the message holds the command and its output."""


def round_up(n: int, to: int = GRANULE) -> int:
    return -(-n // to) * to


def _run_build(cmd: list[str], cwd: Path = REPO) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(f"$ {' '.join(cmd)}\n(exit {proc.returncode})\n{out}")
    return out


@contextmanager
def _build_lock() -> Iterator[None]:
    (NATIVE / "build").mkdir(parents=True, exist_ok=True)
    with open(NATIVE / "build" / ".tests-native.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Binaries:
    """Paths of everything the native tests execute."""

    lib: Path
    fake_dir: Path
    bin_dir: Path

    def __getitem__(self, name: str) -> Path:
        return self.bin_dir / name


BUILD_SKIP = "cannot build libgpuslice here: "  # the skip reason's prefix (+ cannot_build())


def cannot_build() -> str | None:
    """Why this machine cannot build the library (setup.py's rule), or None. Under CI=true the
    `binaries` fixture (tests/conftest.py) fails on it instead of skipping."""
    if _CUDA_FOUND is None:
        return f"{_NO_CUDA} (cuda.h: $CUDA_INCLUDE, $CUDA_HOME/include or the dev extra's package)"
    for tool in ("make", os.environ.get("CC") or "cc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH"
    return None


def build_all(bin_dir: Path) -> Binaries:
    """`make -C native`, `make -C native/fake`, then the probe programs into bin_dir."""
    san = [f"SANITIZE={SANITIZE}"] if SANITIZE else []
    with _build_lock():
        inc = f"CUDA_INCLUDE={CUDA_INCLUDE}"
        _run_build(["make", "-C", "native/fake", "-s", inc, *san])
        _run_build(["make", "-C", "native", "-s", inc, *san])
    if not LIB.is_file():
        raise BuildError(f"`make -C native` succeeded but {LIB} does not exist")
    cc = os.environ.get("CC", "cc")
    warn = [
        "-std=gnu11",
        "-O1",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{NATIVE / 'include'}",
        f"-I{CUDA_INCLUDE}",
    ]
    fake = [f"-L{FAKE_DIR}", f"-Wl,-rpath-link,{FAKE_DIR}"]
    probe = str(PROGS / "probe.c")
    steps = [
        [cc, *warn, "-DGS_PROBE_LINKED", probe, "-o", "probe", *fake, "-lcuda", "-ldl"],
        [
            cc,
            *warn,
            "-DGS_PROBE_LINKED",
            "-DCUDA_API_PER_THREAD_DEFAULT_STREAM",
            probe,
            "-o",
            "probe_ptsz",
            *fake,
            "-lcuda",
            "-ldl",
        ],
        [cc, *warn, probe, "-o", "probe_dl", "-ldl"],
        [cc, *warn, str(PROGS / "fake_smi.c"), "-o", "fake_smi", "-ldl"],
        [
            cc,
            *warn,
            "-DGS_SMI_LINKED",
            str(PROGS / "fake_smi.c"),
            "-o",
            "fake_smi_linked",
            *fake,
            "-lnvidia-ml",
            "-ldl",
        ],
    ]
    for which in "abc":
        extra = ["-DGS_ASK_NEXT"] if which == "b" else []
        steps.append(
            [
                cc,
                *warn,
                "-shared",
                "-fPIC",
                f'-DGS_WHICH="{which}"',
                *extra,
                str(PROGS / "rtld_next_lib.c"),
                "-o",
                f"libgs_next_{which}.so",
                "-ldl",
            ]
        )
    steps.append(
        [
            cc,
            *warn,
            str(PROGS / "rtld_next_main.c"),
            "-o",
            "rtld_next_main",
            "-Wl,--no-as-needed",
            "-L.",
            "-lgs_next_a",
            "-lgs_next_b",
            "-lgs_next_c",
            "-ldl",
            "-Wl,-rpath,$ORIGIN",
        ]
    )
    bin_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        _run_build(step, cwd=bin_dir)
    return Binaries(lib=LIB, fake_dir=FAKE_DIR, bin_dir=bin_dir)


def build_prog(bins: Binaries, source: str, out_dir: Path) -> Path:
    """A test program of progs/ linked against the fake libcuda (threads allowed); its path."""
    exe = out_dir / Path(source).stem
    cc = os.environ.get("CC", "cc")
    _run_build([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", f"-I{CUDA_INCLUDE}",
                str(PROGS / source), "-o", str(exe), f"-L{bins.fake_dir}", "-lcuda", "-lpthread"],
               cwd=out_dir)  # fmt: skip
    return exe


@dataclass
class Line:
    """One result line of gs_probe: `<cmd> [args] rc=<n> [key=value ...]`."""

    cmd: str
    args: list[str]
    kv: dict[str, str]
    text: str

    @property
    def rc(self) -> int:
        return int(self.kv["rc"])

    def int(self, key: str) -> int:
        return int(self.kv[key])


@dataclass
class Result:
    """A finished probe (or other program) run."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    lines: list[Line] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lines = [parse_line(t) for t in self.stdout.splitlines() if "rc=" in t]
        if SANITIZE and any(r in self.stderr for r in _SAN_REPORTS):
            raise AssertionError(f"{SANITIZE} report:\n{self.describe()}")

    def of(self, cmd: str) -> list[Line]:
        return [ln for ln in self.lines if ln.cmd == cmd]

    def one(self, cmd: str) -> Line:
        found = self.of(cmd)
        assert len(found) == 1, f"expected one `{cmd}` line in:\n{self.describe()}"
        return found[0]

    def log_lines(self, level: str | None = None) -> list[str]:
        """libgpuslice's log lines on stderr (`gpuslice[pid:tid] L file:line ...`)."""
        out = [t for t in self.stderr.splitlines() if t.startswith("gpuslice[")]
        return [t for t in out if level is None or t.split(" ", 2)[1] == level]

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n{self.stdout}"
            f"--- stderr\n{self.stderr}"
        )


def parse_line(text: str) -> Line:
    tokens = text.split()
    kv = dict(t.split("=", 1) for t in tokens[1:] if "=" in t)
    args = [t for t in tokens[1:] if "=" not in t]
    return Line(cmd=tokens[0], args=args, kv=kv, text=text)


class Harness:
    """Per-test runner: a private region file and fake-driver state file under tmp_path."""

    def __init__(self, binaries: Binaries, tmp_path: Path) -> None:
        self.bins = binaries
        self.tmp = tmp_path
        self.region = tmp_path / "gpuslice.region"
        self.fake_state = tmp_path / "fake.state"

    def env(
        self,
        *,
        limit: str | None = None,
        preload: bool = True,
        fake_mib: int = 1024,
        devices: int = 1,
        ctx_mib: int = 0,
        region: Path | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES)}
        env.update(
            {
                "LD_LIBRARY_PATH": str(self.bins.fake_dir),
                "FAKE_CUDA_STATE": str(self.fake_state),
                "FAKE_CUDA_MEMORY_MIB": str(fake_mib),
                "FAKE_CUDA_DEVICES": str(devices),
                "FAKE_CUDA_CONTEXT_MIB": str(ctx_mib),
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region or self.region),
            }
        )
        preloads = [str(self.bins.lib)] if preload else []
        if SANITIZE:  # the instrumented fake driver needs the runtime even without the library
            preloads.insert(0, _sanitizer_runtime())
            env.update(_SAN_ENV, GPUSLICE_LIBRARY=str(self.bins.lib))
        if preloads:
            env["LD_PRELOAD"] = ":".join(preloads)
        if limit is not None:
            env["CUDA_DEVICE_MEMORY_LIMIT"] = limit
        env.update(extra or {})
        return env

    def argv(self, cmds: tuple[object, ...], via: str | None, binary: str) -> list[str]:
        head = [str(self.bins[binary])] + (["--via", via] if via else [])
        return head + [str(c) for c in cmds]

    def probe(
        self,
        *cmds: object,
        via: str | None = None,
        binary: str = "probe",
        timeout: float = 30,
        **env_kw: object,
    ) -> Result:
        return self.run(self.argv(cmds, via, binary), timeout=timeout, **env_kw)

    def spawn(
        self, *cmds: object, via: str | None = None, binary: str = "probe", **env_kw: object
    ) -> Spawned:
        env = self.env(**env_kw)  # type: ignore[arg-type]
        return Spawned(
            subprocess.Popen(
                self.argv(cmds, via, binary),
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )

    def run(self, argv: list[str], timeout: float = 60, **env_kw: object) -> Result:
        proc = subprocess.run(
            argv,
            env=self.env(**env_kw),
            capture_output=True,
            text=True,  # type: ignore[arg-type]
            timeout=timeout,
        )
        return Result(argv, proc.returncode, proc.stdout, proc.stderr)

    def gpuslice(self, *args: object, timeout: float = 60, **env_kw: object) -> Result:
        """The `gpuslice` CLI as users run it (console entry point of this checkout)."""
        argv = [
            sys.executable,
            "-c",
            "import sys; from gpuslice.cli import main; sys.exit(main())",
            *map(str, args),
        ]
        env_kw.setdefault("preload", False)
        env = self.env(**env_kw)  # type: ignore[arg-type]
        env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        return Result(argv, proc.returncode, proc.stdout, proc.stderr)

    def smi(self, *, linked: bool = False, **env_kw: object) -> list[dict[str, str]]:
        """fake_smi's per-GPU lines as dicts (and `proc` lines under key 'procs')."""
        binary = "fake_smi_linked" if linked else "fake_smi"
        res = self.run([str(self.bins[binary])], **env_kw)
        assert res.returncode == 0, res.describe()
        gpus: list[dict[str, str]] = []
        for text in res.stdout.splitlines():
            tokens = text.split()
            kv = dict(t.split("=", 1) for t in tokens if "=" in t)
            if tokens[0] == "gpu":
                gpus.append({"index": tokens[1], **kv, "procs": ""})
            elif tokens[0] == "proc":
                gpus[int(tokens[1])]["procs"] += f"{kv['pid']}:{kv['used']} "
        return gpus

    def fake(self) -> FakeState:
        return FakeState(self.fake_state)


@contextmanager
def dir_for_every_uid(gs: Harness, prefix: str, mode: int) -> Iterator[Path]:
    """A directory under /tmp (pytest's tmp_path is root-only) holding a copy of the probe and
    the fake driver's state, writable by every uid as the GPU is; removed afterwards. For the
    tests that run processes under other uids."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        path.chmod(mode)
        shutil.copy2(gs.bins["probe"], path / "probe")
        state = path / "fake.state"
        state.touch()
        state.chmod(0o666)
        yield path
    finally:
        shutil.rmtree(path)


class Spawned:
    """A running probe whose stdout is read by a thread, so tests can wait for single lines."""

    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._err: list[str] = []
        self._pumps = [threading.Thread(target=f, daemon=True) for f in (self._pump,
                                                                          self._pump_err)]
        for t in self._pumps:
            t.start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for text in self.popen.stdout:
            self.lines.put(text)
        self.lines.put(None)

    def _pump_err(self) -> None:  # drained continuously: a chatty child must never block
        assert self.popen.stderr is not None
        for text in self.popen.stderr:
            self._err.append(text)

    @property
    def stderr(self) -> str:
        """What the child wrote to stderr; all of it once it has exited (the pump drained)."""
        if self.popen.poll() is not None:
            self._pumps[1].join(timeout=10)
        return "".join(self._err)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    def wait(self, timeout: float = 20) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


def launch_loops_ms(procs: list[Spawned], timeout: float = 30) -> list[float]:
    """The wall ms each spawned probe's `launch` loop reports (in order); every probe is killed
    and reaped afterwards, whatever happened."""
    try:
        return [float(read_line(p, "launch", timeout=timeout).kv["ms"]) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def read_line(proc: Spawned, cmd: str, timeout: float = 20) -> Line:
    """Waits for the probe's next `cmd` result line (the probe line-buffers its output)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = proc.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            text = None
        if text is None:
            raise AssertionError(
                f"no `{cmd}` line from pid {proc.pid} within {timeout}s "
                f"(exit {proc.popen.poll()}); got {proc.seen!r}"
            )
        proc.seen.append(text)
        if text.split(" ", 1)[0] == cmd and "rc=" in text:
            return parse_line(text)


class FakeState:
    """The fake driver's own accounting, read from its state file (layout: native/fake/fake.h)."""

    MAX_DEV, MAX_PROCS = 8, 128
    MAGIC = 0x4B41464541445543

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        magic, _version, self.ndev = struct.unpack_from("<QII", data, 0)
        assert magic == self.MAGIC, f"{path} is not a fake-driver state file"
        off = 16
        self.total = struct.unpack_from(f"<{self.MAX_DEV}Q", data, off)
        self.peak = struct.unpack_from(f"<{self.MAX_DEV}Q", data, off + 8 * self.MAX_DEV)
        self.oom = struct.unpack_from(f"<{self.MAX_DEV}Q", data, off + 24 * self.MAX_DEV)
        off += 32 * self.MAX_DEV
        self.procs: list[tuple[int, tuple[int, ...]]] = []
        size = 16 + 8 * self.MAX_DEV
        for i in range(self.MAX_PROCS):
            pid, _pad, _start = struct.unpack_from("<iIQ", data, off + i * size)
            used = struct.unpack_from(f"<{self.MAX_DEV}Q", data, off + i * size + 16)
            if pid:
                self.procs.append((pid, used))

    def used(self, dev: int = 0, live_only: bool = True) -> int:
        return sum(u[dev] for pid, u in self.procs if not live_only or _alive(pid))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
