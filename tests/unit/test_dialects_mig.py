"""dialects.py: the pod-level GPU mode (Volcano's vgpu-mode and its twins)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuslice import mig
from gpuslice.dialects import parse_pod
from gpuslice.errors import RequestError


def volcano_pod(ann: dict[str, str], resources: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "p", "annotations": ann},
            "spec": {"containers": [{"name": "c", "resources": {"limits": resources or {
                "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "10000"}}}]}}


@pytest.mark.parametrize(("ann", "want"), [
    ({}, False),
    ({"volcano.sh/vgpu-mode": "mig"}, True),
    ({"volcano.sh/vgpu-mode": "hami-core"}, False),
    ({"nvidia.com/vgpu-mode": "mig"}, True),
    ({"gpuslice.io/gpu-mode": " MIG "}, True),
    ({"volcano.sh/vgpu-mode": "mig", "gpuslice.io/gpu-mode": "mig"}, True),
])
def test_mode_annotations_set_mig(ann, want):
    got = parse_pod(volcano_pod(ann))
    assert got.mig is want
    assert got.slices[0].memory_mib == 10000 and got.slices[0].count == 1


def test_a_volcano_mig_pod_is_read_unchanged_from_volcano():
    pod = volcano_pod({"volcano.sh/vgpu-mode": "mig"},
                      {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "20000"})
    got = parse_pod(pod)
    assert got.mig and got.slices[0].count == 2 and got.slices[0].memory_mib == 20000


def test_an_unknown_mode_is_denied_with_the_fix():
    with pytest.raises(RequestError) as err:
        parse_pod(volcano_pod({"volcano.sh/vgpu-mode": "mps"}))
    assert str(err.value) == ('pod: annotation volcano.sh/vgpu-mode=mps: unknown GPU mode; use '
                              'mig (a MIG instance) or hami-core (a shared slice, the default)')


def test_disagreeing_mode_annotations_are_denied_naming_both():
    with pytest.raises(RequestError) as err:
        parse_pod(volcano_pod({"volcano.sh/vgpu-mode": "mig", "nvidia.com/vgpu-mode": "mig",
                               "gpuslice.io/gpu-mode": "shim"}))
    assert "annotation gpuslice.io/gpu-mode=shim: disagrees with volcano.sh/vgpu-mode=mig" in \
        str(err.value)


def test_the_bundled_volcano_mig_pod_asks_for_a_3g_on_an_h100():
    pod = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "mig" /
                          "volcano-mig-pod.yaml").read_text())
    got = parse_pod(pod)
    (s,) = got.slices
    assert got.mig and s.count == 1
    assert mig.profile_for(mig.CATALOG["H100-80GB"], s.memory_mib, s.cores).name == "3g.40gb"


def test_the_bundled_volcano_pod_stays_a_shared_slice():
    pod = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "pods" /
                          "volcano.yaml").read_text())
    assert parse_pod(pod).mig is False, "vgpu-mode: hami-core"
