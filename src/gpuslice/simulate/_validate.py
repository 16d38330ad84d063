"""msgspec validation errors rewritten as `path: what is wrong` for people, not `$.a[0].b` for code.

Owns: turning msgspec.ValidationError text into the field-path form the CLI prints.
Does not: raise anything itself; callers wrap the text in errors.InputFileError with the file name.
Tests: tests/unit/simulate/test_cluster_file.py, test_trace_file.py (the bad-file paths).
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["explain"]

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)


def explain(exc: msgspec.ValidationError, *, prefix: str = "") -> tuple[str, str]:
    """Split a msgspec error into (field path without `$.`, lower-case description).

    `Expected `int`, got `str` - at `$.nodeGroups[1].gpu.memoryMiB`` becomes
    (`nodeGroups[1].gpu.memoryMiB`, `expected int, got str`). `prefix` is put before the path.
    """
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    path = (m.group("path") or "").lstrip(".")
    what = m.group("what").replace("`", "")
    if "[...]" in path:  # msgspec's mark for a key of a free-form mapping: name the field above
        path, what = path[:path.index("[...]")], f"{what} (in a value nested inside it)"
    what = what[:1].lower() + what[1:]
    if what.startswith("object contains unknown field"):
        field = what.rsplit(" ", 1)[-1]
        path = f"{path}.{field}" if path else field
        what = "unknown key"
    elif what.startswith("object missing required field"):
        field = what.rsplit(" ", 1)[-1]
        path = f"{path}.{field}" if path else field
        what = "missing (required)"
    if prefix:
        path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
    return path, what
