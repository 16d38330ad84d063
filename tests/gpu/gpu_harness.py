"""Helpers of the real-GPU tests: environments, the child-process protocol, ground-truth readers.

Owns: building a child's environment (library via LD_PRELOAD or the `gpuslice` CLI from src/),
`Child` (one tests/gpu/progs/holder.py process: one JSON command in, one JSON reply out, with a
timeout so a hang under the library fails the test instead of stalling the suite), NVML per-process
used memory (pynvml) and per-process accounted usage (gpuslice.shim.Region).
Invariants: the parent never creates a CUDA context; shim variables of the parent never leak
into a child unless passed on purpose. Fixtures live in tests/gpu/conftest.py.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROGS = Path(__file__).resolve().parent / "progs"
LIBRARY = ROOT / "native" / "build" / "libgpuslice.so"
MiB = 1 << 20
GiB = 1 << 30
GRANULE = 2 * MiB  # cuMemAlloc / VMM granularity on Hopper
_SHIM_VARS = ("CUDA_DEVICE_", "GPUSLICE_", "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD", "LIBCUDA_")


def nvml_used_by_pid(pynvml: Any, pid: int, device: int = 0) -> int | None:
    """NVML's per-process used device memory (the ground truth), None when NVML has no row."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(device)
    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid == pid and proc.usedGpuMemory is not None:
            return int(proc.usedGpuMemory)
    return None


def accounted_by_pid(region_path: Path, pid: int, device: int = 0) -> int | None:
    """Bytes the library accounts to `pid` on `device` in the region file (None: no live slot)."""
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    from gpuslice.shim import Region

    for proc in Region.read(region_path).processes:
        if proc.pid == pid and proc.state == "live" and proc.alive:
            return int(proc.used[device])
    return None


def shim_env(library: Path, region: Path, limit: str | None = None,
             **extra: str) -> dict[str, str]:
    """Environment that loads the library with LD_PRELOAD, as `gpuslice run` would."""
    env = source_env()
    env.update(LD_PRELOAD=str(library), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(region))
    if limit is not None:
        env["CUDA_DEVICE_MEMORY_LIMIT"] = limit
    env.update(extra)
    return env


def gpuslice_argv(*args: str) -> list[str]:
    """argv for the `gpuslice` CLI from this source tree (the GPU machine has no install)."""
    code = "import sys; from gpuslice.cli import main; sys.argv[0] = 'gpuslice'; main()"
    return [sys.executable, "-c", code, *args]


def source_env(**extra: str) -> dict[str, str]:
    """Environment for running the CLI from src/ without the library loaded in the parent."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SHIM_VARS)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Child:
    """One holder.py process; `send` writes a command and waits for its one-line JSON reply."""

    def __init__(self, argv: list[str], env: dict[str, str], timeout: float = 60.0) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append),
                         daemon=True).start()
        self.ready = self._read(timeout)
        self.pid = int(self.ready["pid"])

    @staticmethod
    def _pump(stream: Any, put: Callable[[Any], None]) -> None:
        for line in stream:
            put(line)
        put(None)

    def _read(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"child {self.argv[-2:]} gave no reply within {timeout:.0f} s "
                                 f"(a hang under the library?); stderr:\n{self.log()}") from None
        if line is None:
            self.proc.wait(timeout=30)
            raise AssertionError(f"child exited with {self.proc.returncode} before replying; "
                                 f"stderr:\n{self.log()}")
        return json.loads(line)

    def post(self, **cmd: Any) -> None:
        """Send a command without waiting (to start two children's work at once)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 60.0) -> dict[str, Any]:
        """The reply to the oldest command not yet answered."""
        return self._read(timeout)

    def send(self, timeout: float = 60.0, **cmd: Any) -> dict[str, Any]:
        self.post(**cmd)
        return self._read(timeout)

    def log(self) -> str:
        """The child's stderr so far (library log lines included), trimmed for messages."""
        return "".join(line for line in self.stderr if line)[-3000:]

    def close(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """Close stdin first: a holder started through `gpuslice run` is a grandchild and
        exits on end of input; then kill the direct child."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
