"""The user-facing error tree. Every message says what is wrong and how to fix it.

GpusliceError
 ├── RequestError     a pod/container asks for something invalid (webhook denies with it)
 ├── CodecError       an annotation we own is malformed or of an unknown version
 ├── InputFileError   a cluster/trace/config file is malformed (names file and entry)
 ├── ConfigError      a service's config file, env override or flag is invalid (names key)
 ├── ShimError        the in-container library or its region cannot be used
 ├── EnvironmentProblem  the machine lacks what a command needs (NVIDIA driver, GPU, kubelet
 │                    socket, API server at start-up): CLI exit code 3
 └── CommandNotFound  `gpuslice run` was given a program that does not exist: exit 127, as a shell
      └── CommandNotExecutable  ... that exists but cannot be executed: exit 126, as a shell

`exit_code` is what the CLI exits with (docs/troubleshooting.md): 1 bad input, 3 environment.
A message may hold several lines (one problem each); the CLI prints each as its own error line.
"""

from __future__ import annotations

import reprlib
import sys

__all__ = [
    "CodecError",
    "CommandNotExecutable",
    "CommandNotFound",
    "ConfigError",
    "EnvironmentProblem",
    "GpusliceError",
    "InputFileError",
    "RequestError",
    "ShimError",
    "brief",
    "warn",
]


class GpusliceError(Exception):
    """Base of every error gpuslice raises on purpose (never a bare traceback for users)."""

    exit_code = 1


class RequestError(GpusliceError):
    """An invalid slice request. `problems` holds every problem found, one line each."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class CodecError(GpusliceError):
    """An annotation could not be decoded; the message names the annotation and field."""


class InputFileError(GpusliceError):
    """A file given on the command line is malformed; the message names file and entry."""


class ShimError(GpusliceError):
    """libgpuslice or its shared region is missing, mismatched or unreadable."""

    exit_code = 3


class ConfigError(GpusliceError):
    """A service configuration is invalid: the message names the file or variable and the key."""


class EnvironmentProblem(GpusliceError):
    """Something outside gpuslice is missing or unreachable; the message says what to check."""

    exit_code = 3


class CommandNotFound(GpusliceError):
    """The program to run does not exist."""

    exit_code = 127


class CommandNotExecutable(CommandNotFound):
    """The program to run exists but cannot be executed (no x bit, a directory, a bad binary)."""

    exit_code = 126


def warn(message: str) -> None:
    """One `gpuslice: warning: ...` line on stderr: it works, but not as the user may think."""
    print(f"gpuslice: warning: {message}", file=sys.stderr, flush=True)


class _Brief(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxstring, self.maxother = 3, 4, 4, 60, 60

    def repr_int(self, x: int, level: int) -> str:  # str() of a 5,000-digit int raises
        return str(x) if x.bit_length() <= 200 else f"<a {x.bit_length()}-bit integer>"


_BRIEF = _Brief()


def brief(value: object, limit: int = 80) -> str:
    """repr() of a user's value for a message, at most `limit` characters, and cheap however
    big the value is (a YAML alias bomb, a 5,000-digit number): it shows a few items only."""
    text = _BRIEF.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
