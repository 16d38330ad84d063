"""A child forked while another thread of its parent holds one of libgpuslice's locks can still
call CUDA (issue 7 item 8). The fork copies a locked mutex but not the thread that would unlock
it, so before the fix the child's first context creation (the library's context lock) waited for
ever. The library now re-initialises every lock in the child (pthread_atfork)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import CUDA_SUCCESS, Binaries, Harness, build_prog


@pytest.fixture(scope="module")
def fork_child(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_prog(binaries, "fork_child.c", tmp_path_factory.mktemp("fork_child"))


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
