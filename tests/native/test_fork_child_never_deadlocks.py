"""A child forked while another thread of its parent holds one of libgpuslice's locks can still
call CUDA (issue 7 item 8). The fork copies a locked mutex but not the thread that would unlock
it, so before the fix the child's first context creation (the library's context lock) waited for
ever. The library now re-initialises every lock in the child (pthread_atfork)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from harness import CUDA_INCLUDE, CUDA_SUCCESS, PROGS, Harness


@pytest.fixture(scope="module")
def fork_child(binaries, tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("fork") / "fork_child"
    cc = [os.environ.get("CC", "cc"), "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"]
    subprocess.run(
        [*cc, f"-I{CUDA_INCLUDE}", str(PROGS / "fork_child.c"), "-o", str(exe),
         f"-L{binaries.fake_dir}", "-lcuda", "-lpthread"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return exe


@pytest.mark.parametrize("sm_limit", ["0", "30"], ids=["memory limit", "memory + compute limit"])
def test_a_child_forked_while_a_lock_is_held_can_call_cuda(
    gs: Harness, fork_child: Path, sm_limit: str
) -> None:
    slow = {"FAKE_CUDA_CONTEXT_DELAY_MS": "1500", "CUDA_DEVICE_SM_LIMIT": sm_limit}
    res = gs.run([str(fork_child)], timeout=30, limit="512MiB", extra=slow)
    wait = res.one("wait")
    assert wait.rc == 0, f"the child hung on a lock its parent's thread held:\n{res.describe()}"
    child = res.one("child")
    assert child.rc == CUDA_SUCCESS and child.int("alloc") == CUDA_SUCCESS, res.describe()
    assert wait.int("bg") == CUDA_SUCCESS, "the parent's own creation completed"
