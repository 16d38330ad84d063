"""`gpuslice.io/gang` at admission: a tenant's annotation (any pod may carry it), refused on a GPU
pod when it cannot name a directory, left as written on both paths. The node agent's side:
tests/unit/node/test_allocate_gang.py, tests/unit/dra/test_plugin_gang.py."""

from __future__ import annotations

import pytest
from webhook_pods import admitted, container, gpu_pod

from gpuslice import dialects
from gpuslice.webhook import dra
from gpuslice.webhook.admit import TENANT_ANNOTATIONS, Options, Result, admit

GPU = container("gpu", limits={"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"})
CPU = container("web", limits={"cpu": "1"})
GANG = "gpuslice.io/gang"
OPTIONS = Options()


def decide(pod, options=OPTIONS, **kw):
    return admit("CREATE", pod, {}, options, **kw)


def test_the_gang_is_a_tenant_annotation_under_the_key_the_agent_reads():
    assert dialects.GANG_ANNOTATION == GANG
    assert GANG in TENANT_ANNOTATIONS


@pytest.mark.parametrize("value", ["train", "train-42", "a", "0", "a" * 63, "job-1-of-2"])
def test_a_dns_label_passes_on_any_pod_and_is_left_as_written(value):
    assert decide(gpu_pod(CPU, annotations={GANG: value})).result is Result.ALLOWED
    pod = gpu_pod(GPU, annotations={GANG: value})
    decision = decide(pod)
    assert decision.result is Result.PATCHED, decision.message
    assert not [op for op in decision.patch if "annotations" in op["path"]], \
        "the webhook writes no annotation: the node agent reads the tenant's own"
    assert admitted(pod)["metadata"]["annotations"] == {GANG: value}


@pytest.mark.parametrize("value", ["Train", "my_job", "-job", "job-", "a" * 64, "", "job.1",
                                   " job", "job\n", "ns/job", ".."])
def test_a_value_that_is_no_dns_label_is_denied_with_what_to_do(value):
    decision = decide(gpu_pod(GPU, annotations={GANG: value}))
    assert decision.result is Result.DENIED
    (line,) = decision.message.splitlines()
    assert line.startswith(f"pod: annotation {GANG}=")
    assert line.endswith(": must be a DNS label (lowercase letters, digits and '-', at most 63, "
                         "starting and ending with a letter or digit); name the job's pods "
                         "alike, e.g. the job's name"), line


def test_the_denial_shows_the_value_as_written():
    (line,) = decide(gpu_pod(GPU, annotations={GANG: "My_Job"})).message.splitlines()
    assert line.startswith(f"pod: annotation {GANG}=My_Job: must be a DNS label")


def test_a_bad_gang_is_listed_with_the_pods_other_problems():
    pod = gpu_pod(container("gpu", limits={"nvidia.com/gpumem": "4096",
                                           "nvidia.com/gpucores": "150"}),
                  annotations={GANG: "Bad"})
    lines = decide(pod).message.splitlines()
    assert any("gpucores=150" in line for line in lines)
    assert any(line.startswith(f"pod: annotation {GANG}=Bad:") for line in lines)


def test_a_gang_on_the_dra_path_is_admitted_as_written_without_a_warning():
    """The DRA driver reads the gang of a claim's pods at prepare (docs/dra.md)."""
    options = Options(dra=dra.DraOptions(enabled=True, default_path="dra"))
    inventory = dra.Inventory(served=True, slices=3, sharing=True, memory_mib=(81920,))
    pod = gpu_pod(GPU, annotations={GANG: "train"})
    decision = decide(pod, options, dra_inventory=inventory)
    assert decision.result is Result.PATCHED, decision.message
    assert decision.warnings == ()
    assert not [op for op in decision.patch
                if op["path"] in ("/metadata", "/metadata/annotations") or "gang" in op["path"]], \
        "left as written: the DRA driver reads the tenant's own annotation"


SIZE = "gpuslice.io/gang-size"


@pytest.mark.parametrize("value", ["1", "2", "8", "64"])
def test_a_gang_size_is_a_tenant_annotation_left_as_written(value):
    assert dialects.GANG_SIZE_ANNOTATION == SIZE and SIZE in TENANT_ANNOTATIONS
    pod = gpu_pod(GPU, annotations={GANG: "train", SIZE: value})
    decision = decide(pod)
    assert decision.result is Result.PATCHED, decision.message
    assert admitted(pod)["metadata"]["annotations"] == {GANG: "train", SIZE: value}
    assert dialects.gang_size_of(pod) == int(value)


@pytest.mark.parametrize("value", ["0", "65", "-2", "two", "", " 4", "4.0", "1e3", "٤"])
def test_a_gang_size_that_is_no_count_is_denied_with_what_to_do(value):
    (line,) = decide(gpu_pod(GPU, annotations={GANG: "train", SIZE: value})).message.splitlines()
    assert line.startswith(f"pod: annotation {SIZE}=")
    assert line.endswith(': must be a whole number from 1 to 64; give the number of the '
                         'job\'s pods, e.g. "4"'), line


def test_a_gang_size_without_a_gang_is_denied_and_with_a_bad_gang_only_the_gang_is_named():
    (line,) = decide(gpu_pod(GPU, annotations={SIZE: "4"})).message.splitlines()
    assert line == (f"pod: annotation {SIZE}=4: sizes a gang, but the pod names none; add "
                    f"{GANG}: <job>, or remove {SIZE}")
    (line,) = decide(gpu_pod(GPU, annotations={GANG: "Bad", SIZE: "4"})).message.splitlines()
    assert line.startswith(f"pod: annotation {GANG}=Bad:")
    assert dialects.gang_size_of(gpu_pod(GPU, annotations={GANG: "Bad", SIZE: "4"})) == 0
