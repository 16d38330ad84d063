"""The shell blocks of README.md and docs/*.md run as written on a machine like a newcomer's laptop:
a copy of the checkout, a fresh virtual environment, no CUDA headers (CUDA_HOME=/nonexistent),
no GPU. A `console` block's `$ ` lines are run and the lines after each must be its output.

Each block says what to do with an HTML comment on the line before its fence:
`<!-- docs-test: run -->`, or `<!-- docs-test: skip: WHY -->` for what cannot run here (a GPU,
a cluster, the whole test suite). Blocks of pages this test does not own are listed in
ELSEWHERE instead; an unmarked block is skipped, saying so, and on the pages of OWNED it fails.
The sandbox is conftest.py's.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pip installs and whole simulations: about a minute

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OWNED = {"README.md", "docs/install.md", "docs/simulate.md", "docs/troubleshooting.md"}
ELSEWHERE = {  # (page, text in the block) -> why it does not run here
    ("docs/benchmarks.md", "allocator_bench.py"): "a benchmark: its figures are measured by hand "
                                                  "on the machine named there, not asserted",
    ("docs/benchmarks.md", "gpu_suite.sh"): "needs an NVIDIA GPU",
}
SHELLS = ("bash", "sh", "shell", "console")
_MARK = re.compile(r"<!--\s*docs-test:\s*(run|skip:\s*(?P<why>.*?))\s*-->")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mark: str | None  # "run", a skip reason, or None (unmarked)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if m.group(1) in SHELLS:
            before = next((t for t in reversed(lines[:i]) if t.strip()), "")
            mark = _MARK.search(before)
            verdict = None if mark is None else mark.group("why") or "run"
            out.append(Block(page, i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n", verdict))
        i = end + 1
    return out


BLOCKS = [b for p in PAGES for b in _blocks(p)]


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block as (command, expected output lines); a bash block is one command."""
    if block.lang != "console":
        return [(block.text, [])]
    out: list[tuple[str, list[str]]] = []
    lines = iter(block.text.splitlines())
    for line in lines:
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\"):
                cmd = cmd[:-1] + next(lines).strip()
            out.append((cmd, []))
        elif out:
            out[-1][1].append(line)
    return out


_ran: dict[str, subprocess.CompletedProcess[str]] = {}  # same command, same output: run once


def _run(cmd: str, tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if cmd not in _ran or "install" in cmd:
        _ran[cmd] = subprocess.run(["bash", "-e", "-c", cmd], cwd=tree, env=env,
                                   capture_output=True, text=True, timeout=300)
    return _ran[cmd]


def _verdict(block: Block) -> str | None:
    if block.mark is not None:
        return block.mark
    return next((why for (page, text), why in ELSEWHERE.items()
                 if page == block.page and text in block.text), None)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_shell_block_runs_as_written(block: Block,
                                         sandbox: tuple[Path, dict[str, str]]) -> None:
    verdict = _verdict(block)
    if verdict is None:
        pytest.skip(f"{block.id}: no docs-test marker (see this test's docstring)")
    if verdict != "run":
        pytest.skip(f"{block.id}: {verdict}")
    tree, env = sandbox
    for cmd, expected in _commands(block):
        got = _run(cmd, tree, env)
        assert got.returncode == 0, f"{block.id}: `{cmd}` exited {got.returncode}:\n" \
                                    f"{got.stdout}{got.stderr}"
        if expected:
            lines = [t.rstrip() for t in (got.stdout + got.stderr).rstrip("\n").splitlines()]
            assert lines == [t.rstrip() for t in expected], (
                f"{block.id}: `{cmd}` printed something else than the page shows")


def test_every_shell_block_of_the_pages_we_own_says_whether_it_runs() -> None:
    unmarked = [b.id for b in BLOCKS if b.page in OWNED and _verdict(b) is None]
    assert not unmarked, (
        f"add <!-- docs-test: run --> or <!-- docs-test: skip: WHY --> before {unmarked}")


def test_the_parser_finds_the_blocks_a_page_holds() -> None:
    pages = {b.page for b in BLOCKS}
    assert {"README.md", "docs/install.md", "docs/simulate.md"} <= pages
    (cmd, out), *_ = _commands(next(b for b in BLOCKS if b.page == "docs/simulate.md"
                                    and b.lang == "console" and "metric" in b.text))
    assert cmd.startswith("gpuslice simulate") and "makespan" in "\n".join(out)
