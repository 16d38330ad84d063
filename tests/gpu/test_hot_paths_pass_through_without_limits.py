"""No cost when unlimited, checked structurally: which library serves the hot entry points.

A runtime gets cuLaunchKernel and cuMemAlloc_v2 through cuGetProcAddress_v2. Without a compute
limit (unset, or CUDA_DEVICE_SM_LIMIT=0) the library must hand out the driver's own cuLaunchKernel
(so a launch costs nothing extra, whatever the timing noise); with a limit it must hand out its
own. With a memory limit cuMemAlloc_v2 must be the library's. The limited rows show the check
can fail. Addresses are attributed through /proc/self/maps (tests/gpu/progs/which_library.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_harness import PROGS, shim_env

pytestmark = pytest.mark.gpu

SYMBOLS = ["cuLaunchKernel", "cuMemAlloc", "cuMemGetInfo", "cuGraphLaunch"]

# (case, extra env, symbol -> expected owner: "driver" or "library"; unlisted symbols are recorded)
CASES = [
    ("no limits", {}, {"cuLaunchKernel": "driver", "cuGraphLaunch": "driver"}),
    ("CUDA_DEVICE_SM_LIMIT=0", {"CUDA_DEVICE_SM_LIMIT": "0"},
     {"cuLaunchKernel": "driver", "cuGraphLaunch": "driver"}),
    ("memory limit only", {"CUDA_DEVICE_MEMORY_LIMIT": "4GiB"},
     {"cuLaunchKernel": "driver", "cuMemAlloc": "library", "cuMemGetInfo": "library"}),
    ("CUDA_DEVICE_SM_LIMIT=50", {"CUDA_DEVICE_SM_LIMIT": "50"},
     {"cuLaunchKernel": "library", "cuGraphLaunch": "library"}),
]


@pytest.mark.parametrize(("case", "extra", "expected"), CASES, ids=[c[0] for c in CASES])
def test_cu_get_proc_address_hands_out_the_library_only_where_a_limit_needs_it(
        case: str, extra: dict[str, str], expected: dict[str, str], libgpuslice: Path,
        region_path: Path, record: Callable[..., None]) -> None:
    env = shim_env(libgpuslice, region_path, **extra)
    done = subprocess.run([sys.executable, str(PROGS / "which_library.py"), *SYMBOLS], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"probe failed under the library: {done.stdout}{done.stderr}"
    owners = json.loads(done.stdout.strip().splitlines()[-1])
    served = {sym: ("library" if path.endswith("libgpuslice.so") else
                    "driver" if "libcuda.so" in path else path)
              for sym, path in owners.items()}
    record("proc_address_owner", case=case, served=served)
    wrong = {sym: served.get(sym) for sym, want in expected.items() if served.get(sym) != want}
    assert not wrong, (f"{case}: expected {expected}, cuGetProcAddress_v2 served {served} "
                       f"(paths {owners}); stderr:\n{done.stderr[-1500:]}")
