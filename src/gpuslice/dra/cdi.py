"""CDI spec files of prepared claims: what the container runtime gives every container that
uses a claim.

Owns: one spec per claim, `<cdiDir>/gpuslice.io-claim_<claim-uid>.json` (CDI 0.5.0, kind
`gpuslice.io/claim`, one device named by the claim uid: CDI id `gpuslice.io/claim=<uid>`),
whose containerEdits are the device plugin's env and mounts (container/edits.container_edits:
library, ld.so.preload, the claim's region directory, the board, the limits as env, the gang
directory of its pods) plus the device nodes of its GPUs and of the driver; writing it
atomically (temporary file renamed into place: files.write_atomic, not durable: rebuilt at the
next prepare) and removing it.
Does not: decide limits (claims.py) or write regions (container/regions.py).
Invariant: a reader (the runtime) sees the old spec, the new one or none, never half of one.
Tests: tests/unit/dra/test_cdi.py
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuslice.container.edits import Layout, container_edits
from gpuslice.files import write_atomic
from gpuslice.shim import RegionSpec

__all__ = ["CDI_VERSION", "KIND", "build", "check_uid", "device_id", "path", "remove", "write"]

# the least version that allows what the spec holds (0.5.0: a device name starting with a digit,
# as uids do): a runtime's CDI library refuses versions newer than it knows, so the lowest
# sufficient one is read by the most runtimes
CDI_VERSION = "0.5.0"
KIND = "gpuslice.io/claim"
DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")  # a CDI device name, and a safe file name


def check_uid(uid: str) -> str:
    """`uid` if it can name a CDI device and a file; ValueError otherwise (never a path)."""
    if not _NAME.fullmatch(uid) or len(uid) > 128:
        raise ValueError(f"claim uid {uid!r}: not a Kubernetes uid")
    return uid


def path(cdi_dir: str | Path, claim_uid: str) -> Path:
    return Path(cdi_dir) / f"{KIND.replace('/', '-')}_{check_uid(claim_uid)}.json"


def device_id(claim_uid: str) -> str:
    return f"{KIND}={check_uid(claim_uid)}"


def build(claim_uid: str, region: RegionSpec, minors: Iterable[int], region_dir: str,
          layout: Layout, *, gang_dir: str = "") -> dict[str, Any]:
    """The claim's CDI spec: the device plugin's env and mounts for this region (and gang
    directory `gang_dir`, "" none), and the device nodes of its GPUs (/dev/nvidia<minor>) and
    of the driver."""
    envs, mounts = container_edits(region, region_dir, layout, gang_dir=gang_dir)
    nodes = [f"/dev/nvidia{i}" for i in dict.fromkeys(minors)] + list(DRIVER_NODES)
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{
            "name": check_uid(claim_uid),
            "containerEdits": {
                "env": [f"{k}={v}" for k, v in envs.items()],
                "mounts": [{"hostPath": m.host_path, "containerPath": m.container_path,
                            "options": ["ro" if m.read_only else "rw", "nosuid", "nodev",
                                        "rbind"]} for m in mounts],
                "deviceNodes": [{"path": n} for n in nodes],
            },
        }],
    }


def write(cdi_dir: str | Path, claim_uid: str, spec: dict[str, Any]) -> Path:
    """Write the claim's spec atomically; returns its path."""
    target = path(cdi_dir, claim_uid)
    # not durable: /var/run is a tmpfs, and after a crash the kubelet prepares again, which
    # rewrites the spec from the checkpoint (an fsync here tripled a prepare's time)
    write_atomic(target, json.dumps(spec, indent=1, sort_keys=True).encode(), 0o644,
                 durable=False)
    return target


def remove(cdi_dir: str | Path, claim_uid: str) -> bool:
    """Remove the claim's spec; False if there was none."""
    try:
        os.unlink(path(cdi_dir, claim_uid))
    except FileNotFoundError:
        return False
    return True

