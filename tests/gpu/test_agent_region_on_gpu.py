"""On a real GPU: the region the node agent writes at Allocate caps PyTorch whatever the
container's own env says. The region is placed by container.regions.place and bind-mounted at the
library's fixed path (/var/run/gpuslice) in a private mount namespace, as the kubelet mounts it;
the process's env is a tenant's that tries every way past the cap (a 1 TiB limit, no SM limit,
its own region path). Needs root (mounts); skips otherwise.
Run on the GPU machine:
  PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_agent_region_on_gpu.py -q -rA
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, MiB, nvml_used_by_pid, source_env

from gpuslice.container import regions
from gpuslice.shim import AGENT_REGION, Region, RegionSpec

pytestmark = pytest.mark.gpu

CAP = 3072 * MiB
TENANT = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1Ti", "CUDA_DEVICE_SM_LIMIT": "0",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/tenants-own.region"}
MOUNT = ('mount -t tmpfs none /run && mkdir -p {dir} && mount --bind "$0" {dir} && exec "$@"'
         .format(dir=os.path.dirname(AGENT_REGION)))


def test_the_agents_region_caps_pytorch_against_the_tenants_env(
        libgpuslice: Path, torch_available: None, nvml: Any,
        children: Callable[..., Any], tmp_path: Path, record: Callable[..., None]) -> None:
    prefix = ["unshare", "--mount", "sh", "-c", MOUNT]
    if os.geteuid() != 0 or subprocess.run([*prefix, "/", "true"],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount rights (unshare --mount)")
    uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    d = regions.prepare(tmp_path / "regions", "uid-p", "main")
    assert regions.place(d / "region", RegionSpec((uuid,), (CAP,))) == "created"
    env = source_env(LD_PRELOAD=str(libgpuslice), GPUSLICE_DEVICE_UUIDS=uuid, **TENANT)
    child = children(env, api="torch", prefix=[*prefix, str(d)])
    assert child.ready["total"] == CAP, (
        f"mem_get_info total must be the agent's cap, not the env's 1 TiB: {child.ready}\n"
        f"{child.log()}")
    filled = child.send(op="fill", chunks=[256 * MiB, 16 * MiB, 2 * MiB])
    used = nvml_used_by_pid(nvml, child.pid) or 0
    record("agent_region_cap", cap=CAP, error=filled["error"], nvml_used=used)
    assert filled["error"] == "OutOfMemoryError", filled
    assert used <= CAP + GRANULE, f"NVML shows {used / MiB:.0f} MiB past the agent's cap"
    assert not Path(TENANT["CUDA_DEVICE_MEMORY_SHARED_CACHE"]).exists()
    assert Region.read(d / "region", check_alive=False).pid_ns != 0, "claimed by the process"
