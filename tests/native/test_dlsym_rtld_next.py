"""libgpuslice interposes dlsym (a dlopen'ed libcuda handle bypasses LD_PRELOAD), but for every
other lookup dlsym must behave exactly as glibc's: RTLD_NEXT is relative to the caller (main
program, or a library in the middle of the search order), RTLD_DEFAULT and handles unchanged."""

from __future__ import annotations

from harness import Harness


def test_dlsym_answers_are_identical_with_and_without_the_library(gs: Harness) -> None:
    prog = [str(gs.bins["rtld_next_main"])]
    bare = gs.run(prog, preload=False)
    shim = gs.run(prog, limit="64Mi")
    assert bare.returncode == 0 and shim.returncode == 0, shim.describe()
    assert "b_next=c" in bare.stdout, f"the test program itself is wrong:\n{bare.describe()}"
    assert shim.stdout == bare.stdout, (
        f"RTLD_NEXT must stay relative to the caller:\n{shim.describe()}"
    )


def test_dlsym_on_the_libcuda_handle_returns_the_librarys_handler(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "alloc",
        64 * 1024 * 1024,
        "alloc",
        1,
        via="dlopen",
        binary="probe_dl",
        limit="64Mi",
    )
    assert [a.rc for a in res.of("alloc")] == [0, 2], res.describe()
