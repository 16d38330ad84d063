"""Issue 13 on a real GPU: a DRA claim with a 4 GiB / 30 % share of GPU 0, prepared by the
kubelet DRA plugin (dra/plugin.py, claim from a stand-in API, the GPU's real UUID from NVML),
caps PyTorch through its CDI spec's container edits applied by hand as a runtime applies them:
the spec's env (then a tenant's env that tries to undo it), its region and board directories
bind-mounted at their container paths in a private mount namespace, the library through
LD_PRELOAD (the repo build) instead of the spec's /etc/ld.so.preload mount.
Checks: torch.cuda.mem_get_info total = 4 GiB, filling memory ends in OutOfMemoryError at the
cap (NVML agrees), and an 8192^2 bf16 matmul loop runs at about 30 % of its unlimited speed.
Needs root (mounts). Run on the GPU machine:
  PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_dra_share_on_gpu.py -q -rA
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, MiB, nvml_used_by_pid, source_env

from gpuslice.container import regions
from gpuslice.container.edits import Layout
from gpuslice.dra import DRIVER, cdi
from gpuslice.dra.claims import NodeDevice
from gpuslice.dra.plugin import DraPlugin
from gpuslice.shim import AGENT_BOARD, AGENT_REGION

pytestmark = pytest.mark.gpu

CAP = 4096 * MiB
CORES = 30
UID = "0d7a0000-0000-4000-8000-000000000013"
TENANT = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1Ti", "CUDA_DEVICE_SM_LIMIT": "0",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/tenants-own.region"}
# matmuls per second over a fixed time, after a warm-up (one JSON line on stdout)
MATMUL = """
import json, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize(); n = 0; t0 = time.monotonic()
while time.monotonic() - t0 < 8:
    for _ in range(4): a @ b
    torch.cuda.synchronize(); n += 4
print(json.dumps({"rate": n / (time.monotonic() - t0)}))
"""


class OneClaim:
    """The API server's answer for the claim: kube-scheduler's allocation of a 4 GiB / 30 %
    share of gpu-0 on this node (the samples' shape: consumedCapacity + shareID)."""

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace, "uid": UID},
                "status": {"allocation": {"devices": {"results": [{
                    "driver": DRIVER, "pool": "gpu-node", "request": "gpu", "device": "gpu-0",
                    "shareID": "6a0b5b63-8a43-4f0e-9d0f-3b1f4f6c0a13",
                    "consumedCapacity": {"memory": "4Gi", "cores": str(CORES)}}]}},
                    "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "p"}]}}

    async def set_devices(self, *args: Any) -> None:
        pass


def _edits(tmp_path: Path, uuid: str, memory_mib: int) -> dict[str, Any]:
    """Prepare the claim through the plugin; its CDI spec's containerEdits."""
    state = tmp_path / "state"
    state.mkdir()
    board = regions.prepare_board(state)
    layout = Layout(library_host="/unused", preload_host="/unused",
                    regions_host=str(state / "regions"), board_host=str(board))
    plugin = DraPlugin(driver=DRIVER, node="gpu-node", api=OneClaim(),
                       devices=lambda: {"gpu-0": NodeDevice("gpu-0", uuid, 0, memory_mib, True)},
                       state_dir=state, cdi_dir=tmp_path / "cdi", layout=layout)

    async def prepare() -> None:
        await plugin.prepare("default", "train", UID)
        await plugin.stop()

    asyncio.run(prepare())
    return json.loads(cdi.path(tmp_path / "cdi", UID).read_text())["devices"][0]["containerEdits"]


def _container(edits: dict[str, Any]) -> list[str]:
    """argv prefix: a private mount namespace with the spec's region and board mounts."""
    binds = [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]
             if m["containerPath"] in (os.path.dirname(AGENT_REGION), AGENT_BOARD)]
    script = "mount -t tmpfs none /run && " + " && ".join(
        f"mkdir -p {shlex.quote(c)} && mount --bind {shlex.quote(h)} {shlex.quote(c)}"
        for h, c in binds) + ' && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "sh"]


def _matmul_rate(env: dict[str, str], prefix: list[str]) -> float:
    run = subprocess.run([*prefix, sys.executable, "-c", MATMUL], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return float(json.loads(run.stdout.strip().splitlines()[-1])["rate"])


def test_a_dra_share_caps_pytorch_memory_and_compute_through_its_cdi_edits(
        libgpuslice: Path, torch_available: None, nvml: Any,
        children: Callable[..., Any], tmp_path: Path, record: Callable[..., None]) -> None:
    if os.geteuid() != 0 or subprocess.run(["unshare", "--mount", "true"],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount rights (unshare --mount)")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    total_mib = nvml.nvmlDeviceGetMemoryInfo(handle).total // MiB // 256 * 256
    edits = _edits(tmp_path, uuid, total_mib)
    spec_env = dict(e.split("=", 1) for e in edits["env"])
    assert spec_env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert spec_env["CUDA_DEVICE_SM_LIMIT"] == str(CORES)
    env = source_env(**{**spec_env, "LD_PRELOAD": str(libgpuslice), **TENANT})
    prefix = _container(edits)

    child = children(env, api="torch", prefix=prefix)
    assert child.ready["total"] == CAP, (
        f"mem_get_info total must be the claim's 4 GiB, not the env's 1 TiB: {child.ready}\n"
        f"{child.log()}")
    filled = child.send(op="fill", chunks=[256 * MiB, 16 * MiB, 2 * MiB])
    used = nvml_used_by_pid(nvml, child.pid) or 0
    child.kill()
    assert filled["error"] == "OutOfMemoryError", filled
    assert used <= CAP + GRANULE, f"NVML shows {used / MiB:.0f} MiB past the claim's cap"
    assert not Path(TENANT["CUDA_DEVICE_MEMORY_SHARED_CACHE"]).exists()

    unlimited = _matmul_rate(source_env(), [])
    limited = _matmul_rate(env, prefix)
    share = limited / unlimited
    record("dra_share_on_gpu", cap=CAP, mem_get_info_total=child.ready["total"],
           fill_error=filled["error"], nvml_used=used, cores=CORES,
           unlimited_matmul_per_s=round(unlimited, 2), limited_matmul_per_s=round(limited, 2),
           compute_share=round(share, 3))
    assert 0.22 <= share <= 0.38, (
        f"matmul throughput under the {CORES} % share is {share:.0%} of unlimited")
