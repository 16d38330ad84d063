"""What slices.py publishes passes kube-apiserver v1.36's validation of consumable capacity
(the rules recorded in dra-samples, which the stand-in validator reproduces case by case)."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuslice import model
from gpuslice.dra.slices import build_slice
from kubeapi import dra_samples
from kubeapi.dra_validation import slice_problems

RESULTS = (dra_samples.SAMPLES / "returned" / "validation-results.txt").read_text()
CASES = sorted(p.stem for p in (dra_samples.SAMPLES / "input" / "validation").glob("*.yaml"))


def recorded(case: str) -> str:
    """The server's answer to input/validation/<case>.yaml."""
    return RESULTS.split(f"### {case} ")[1].split("###")[0]


@pytest.mark.parametrize("case", CASES)
def test_the_validator_gives_the_real_servers_verdict(case):
    obj = yaml.safe_load((dra_samples.SAMPLES / "input" / "validation" / f"{case}.yaml")
                         .read_text())
    answer = recorded(case)
    if obj["kind"] != "ResourceSlice":
        assert "created" in answer
        return
    problems = slice_problems(obj)
    if "created" in answer:
        assert problems == []
        return
    (field, message), = problems
    real = re.search(r"is invalid: (\S+): (.*)", answer)
    assert field == real.group(1)
    assert message.split(":")[0] == real.group(2).split(":")[0]


@given(mib=st.integers(128, 400_000), step=st.sampled_from([1, 64, 256, 1000, 1024]))
def test_every_slice_we_build_is_valid(mib, step):
    gpu = model.GPU(uuid="GPU-a", model="m", memory_mib=mib)  # after memoryScaling
    if mib < step:
        return  # a ConfigError instead (test_slices.py)
    assert slice_problems(build_slice("n", [gpu], step_mib=step)) == []
