"""YAML input files read with bounded work: anchors and aliases may not expand into a bomb.

Owns: reading the simulator's YAML files (cluster, trace) safely: `yaml.safe_load` rules, plus a
cap on what aliases add (a few lines of `&a [*a, *a, ...]` nest into billions of values that
every later step would walk), nesting depth, and integers too long for Python to read.
Does not: validate the document (cluster.py, trace.py do).
Failure: InputFileError `file:line: not valid YAML (...); fix` or `...: aliases expand ...`.
Tests: tests/unit/simulate/test_trace_file.py, test_cluster_file.py (bad files).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuslice.errors import InputFileError

__all__ = ["MAX_ALIAS_VALUES", "load_yaml"]

MAX_ALIAS_VALUES = 1_000_000
"""Most values that aliases may add to a document beyond the ones written out."""


def _expanded(root: yaml.Node) -> tuple[int, int]:
    """(values as written, values once every alias is expanded); iterative, cycles count once."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and not children_done:
            continue
        kids = [] if isinstance(node, yaml.ScalarNode) else (
            node.value if isinstance(node, yaml.SequenceNode)
            else [n for pair in node.value for n in pair])
        if children_done:
            sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            continue
        sizes[id(node)] = 1  # a cycle back to this node counts once
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return len(sizes), sizes[id(root)]


def load_yaml(text: str, *, file: str, fix: str) -> Any:
    """The document in `text`, or InputFileError naming `file`, the line and `fix`."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        written, expanded = _expanded(root)
        if expanded - written > MAX_ALIAS_VALUES:
            raise InputFileError(f"{file}: aliases (*name) expand {written:,} written values into "
                                 f"more than {written + MAX_ALIAS_VALUES:,}; write the values out "
                                 "or use fewer aliases")
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputFileError(f"{file}{at}: not valid YAML ({problem}); {fix}") from None
    except RecursionError:
        raise InputFileError(f"{file}: nested too deeply to read; {fix}") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit limit
        raise InputFileError(f"{file}: a number is too long to read ({str(exc)[:60]}...); write "
                             "numbers of a sensible size") from None
    finally:
        loader.dispose()
