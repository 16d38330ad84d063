"""CI's sanitizer pass (issue 7 item 11): a subset of the fake-driver tests run again against the
library and fake driver built with AddressSanitizer + UndefinedBehaviorSanitizer (every UB report
fatal), and the thread-racing ones with ThreadSanitizer. Any sanitizer report fails the run
(tests/native/harness.py). The whole native suite: `make -C native check-asan` / `check-tsan`
(docs/shim.md "Checks"). Skipped, with the reason, where the compiler has no sanitizer runtime."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import REPO, SANITIZE

SUBSETS = {
    "asan": [
        "tests/native/test_memory_cap_boundaries.py",
        "tests/native/test_allocation_paths.py",
        "tests/native/test_cap_holds_with_allocations_in_flight.py",
        "tests/native/test_fork_child_never_deadlocks.py",
        "tests/native/compute/test_stale_clock_never_hangs.py",
    ],
    "tsan": [
        "tests/native/test_cap_holds_with_allocations_in_flight.py",
        "tests/native/test_fork_child_never_deadlocks.py",
    ],
}
FLAGS = {"asan": "-fsanitize=address,undefined", "tsan": "-fsanitize=thread"}


def _compiler_lacks(kind: str, tmp: Path) -> str | None:
    src = tmp / "t.c"
    src.write_text("int main(void) { return 0; }\n")
    cc = os.environ.get("CC", "cc")
    res = subprocess.run([cc, FLAGS[kind], str(src), "-o", str(tmp / "t")], capture_output=True)
    if res.returncode != 0:
        return f"{cc} cannot link {FLAGS[kind]} (no sanitizer runtime installed)"
    if subprocess.run([str(tmp / "t")], capture_output=True).returncode != 0:
        return f"{FLAGS[kind]} programs do not run here"
    return None


@pytest.mark.slow
@pytest.mark.skipif(SANITIZE != "", reason="already running under a sanitizer build")
@pytest.mark.parametrize("kind", ["asan", "tsan"])
def test_the_fake_driver_tests_pass_under_sanitizers(kind: str, tmp_path: Path,
                                                    binaries: object) -> None:
    # `binaries`: the plain build first; where the library cannot be built at all, that
    # fixture skips with the one reason every native test gives.
    why = _compiler_lacks(kind, tmp_path)
    if why:
        pytest.skip(why)
    env = {**os.environ, "GPUSLICE_SANITIZE": kind}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", *SUBSETS[kind], "-q", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-x"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, f"{kind} run failed:\n{tail}"
    assert " passed" in res.stdout and "skipped" not in res.stdout.splitlines()[-1], tail
