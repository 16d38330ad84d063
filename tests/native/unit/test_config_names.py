"""Every GPUSLICE_* environment name used anywhere in the project is one libgpuslice knows: the
library refuses to start CUDA on an unknown GPUSLICE_* name (a typo must not pass silently), so a
new variable read by a tool (the CLI, setup.py, tests) must be added to gs_known_names in
native/src/config.c, or every CUDA process that inherits it would fail at cuInit."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"\bGPUSLICE_[A-Z0-9_]*[A-Z0-9]\b")
SCAN = ("src", "tests", "benchmarks", "deploy", "charts", "docs", "native", "setup.py")
SUFFIXES = {".py", ".c", ".h", ".sh", ".md", ".yaml", ".yml", ".toml", ".def", ""}
TYPOS = {"GPUSLICE_COMPUTE_MOD"}  # the misspelling the tests feed the library on purpose


def _project_names() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in SCAN:
        base = ROOT / top
        files = [base] if base.is_file() else base.rglob("*") if base.is_dir() else []
        for path in files:
            if not path.is_file() or path.suffix not in SUFFIXES or "build" in path.parts:
                continue
            for name in NAME.findall(path.read_text(errors="replace")):
                if not name.endswith("_H") and name not in TYPOS:  # C include guards, not variables
                    found.setdefault(name, path)
    return found


def test_every_gpuslice_variable_of_the_project_is_known_to_the_library() -> None:
    source = (ROOT / "native/src/config.c").read_text()
    table = re.search(r"gs_known_names\[\] = \{(.*?)\};", source, re.S)
    assert table, "config.c lost its gs_known_names table"
    known = set(re.findall(r'"(GPUSLICE_\w+)"', table.group(1)))
    prefixes = tuple(k for k in known if k.endswith("_"))  # a service's whole namespace

    def listed(name: str) -> bool:
        return name in known or name.startswith(prefixes) or f"{name}_" in prefixes

    missing = {n: str(p.relative_to(ROOT)) for n, p in _project_names().items() if not listed(n)}
    assert not missing, (
        f"add these to gs_known_names in native/src/config.c (cuInit refuses unknown GPUSLICE_* "
        f"names): {missing}"
    )
