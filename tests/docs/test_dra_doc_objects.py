"""docs/dra.md's YAML is what gpuslice really uses: the blocks marked `<!-- docs-test: run -->`
are created with kubectl on the test API server (either backend), the DeviceClass is the one the
chart installs, the "4 GiB and 30 %" template is allocated as 4Gi / 30 cores, and the slice
excerpt is what slices.py publishes for an H100."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gpuslice import model
from gpuslice.dra import DRIVER
from gpuslice.dra.slices import build_slice
from kubeapi.dra_allocator import Usage, devices_of, plan

PAGE = Path(__file__).resolve().parents[2] / "docs" / "dra.md"
_BLOCK = re.compile(r"(?:<!--\s*docs-test:\s*(\w+)[^>]*-->\n)?```yaml\n(.*?)```", re.S)


def blocks() -> list[tuple[str | None, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(PAGE.read_text())]


def objects() -> list[dict]:
    return [o for mark, text in blocks() if mark == "run" for o in yaml.safe_load_all(text)]


def test_the_page_has_the_device_class_and_the_claim_template_marked_to_run():
    kinds = [o["kind"] for o in objects()]
    assert {"DeviceClass", "ResourceClaimTemplate", "Pod"} <= set(kinds)


def test_every_marked_block_is_accepted_by_the_api_server(kube_api, tmp_path):
    for i, (mark, text) in enumerate(blocks()):
        if mark == "run":
            path = tmp_path / f"block-{i}.yaml"
            path.write_text(text)
            # a real cluster may hold the DeviceClass already (benchmarks/dra_e2e.py makes it)
            kube_api.kubectl("delete", "--ignore-not-found", "-f", str(path))
            kube_api.kubectl("create", "-f", str(path))
    got = kube_api.kubectl("get", "resourceclaimtemplates", "gpu-4g-30", "-o", "yaml").stdout
    assert yaml.safe_load(got)["spec"]["spec"]["devices"]["requests"][0]["exactly"][
        "capacity"]["requests"] == {"memory": "4Gi", "cores": "30"}


def test_the_device_class_is_the_drivers():
    (cls,) = [o for o in objects() if o["kind"] == "DeviceClass"]
    assert cls["metadata"]["name"] == DRIVER
    assert cls["spec"]["selectors"] == [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]


def h100_slice() -> dict:
    gpu = model.GPU(uuid="GPU-8c1d", model="NVIDIA H100 80GB HBM3", memory_mib=81559,
                    sm_count=132, numa_node=0)
    return build_slice("node-a", [gpu])


def test_the_template_gets_4gi_and_30_cores_of_a_gpu():
    (template,) = [o for o in objects() if o["kind"] == "ResourceClaimTemplate"]
    claim = {"metadata": {"name": "train-gpu", "namespace": "default"},
             "spec": template["spec"]["spec"]}
    (cls,) = [o for o in objects() if o["kind"] == "DeviceClass"]
    allocation = plan(claim, devices_of([h100_slice()]), Usage.of([]), {DRIVER: cls})
    (result,) = allocation["devices"]["results"]
    assert result["consumedCapacity"] == {"memory": "4Gi", "cores": "30"}


def test_the_slice_excerpt_is_what_an_h100_node_publishes():
    (excerpt,) = [yaml.safe_load(t) for mark, t in blocks() if mark is None and "gpu-0" in t]
    (device,) = h100_slice()["spec"]["devices"]
    assert excerpt[0]["capacity"] == device["capacity"]
    assert excerpt[0]["allowMultipleAllocations"] is True
    assert set(excerpt[0]["attributes"]) <= set(device["attributes"]) | {
        "driverVersion", "cudaDriverVersion"}
