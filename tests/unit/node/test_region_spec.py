"""The region the node agent writes (shim.RegionSpec) is the one the library would write for the
same env: it parses with Region.read, round-trips, and refuses what the library would refuse."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gpuslice.errors import ShimError
from gpuslice.node.settings import NodeConfig
from gpuslice.shim import AGENT_BOARD, AGENT_REGION, MAGIC, REGION_SIZE, VERSION, Region, RegionSpec

GPU_A = "GPU-0a000000-0000-0000-0000-000000000000"
GPU_B = "GPU-0b000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(("sm", "mode", "prio"), [(0, "hard", 0), (30, "work-conserving", 1),
                                                  (100, "hard", 1)])
def test_a_spec_encodes_a_region_that_reads_back_with_its_limits(tmp_path, sm, mode, prio):
    spec = RegionSpec(device_uuids=(GPU_A, GPU_B), limits=(4 << 30, 0), sm_limit=sm,
                      compute_mode=mode, priority=prio)
    data = spec.encode(created_unix_s=1_800_000_000)
    assert len(data) == REGION_SIZE
    assert struct.unpack_from("<QI", data) == (MAGIC, VERSION)
    (tmp_path / "region").write_bytes(data)
    r = Region.read(tmp_path / "region")
    assert [(d.index, d.uuid, d.limit, d.device_index) for d in r.devices if d.uuid] == [
        (0, GPU_A, 4 << 30, 0), (1, GPU_B, 0, 1)]
    assert r.index_limits == (4 << 30,) + (0,) * 15 and r.device_count == 1
    assert (r.sm_limit, r.compute_mode, r.priority) == (0 if sm == 100 else sm,
                                                         int(mode != "hard"), prio)
    assert (r.uuid_list, r.pid_ns, r.creator_pid, r.slot_hwm, r.processes) == (True, 0, 0, 0, ())
    assert spec.matches(r)
    assert not RegionSpec((GPU_A, GPU_B), (4 << 30, 1), sm, mode, prio).matches(r)
    assert not RegionSpec((GPU_B, GPU_A), (4 << 30, 0), sm, mode, prio).matches(r)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"device_uuids": ("gpu0",)}, "GPU-<hex>"),
    ({"device_uuids": ()}, "1..16"),
    ({"device_uuids": (GPU_A,) * 17, "limits": (1,) * 17}, "1..16"),
    ({"limits": (1, 2)}, "one per GPU"),
    ({"limits": (1 << 63,)}, "2^63-1"),
    ({"sm_limit": 101}, "0..100"),
    ({"compute_mode": "fair"}, "hard, work-conserving"),
    ({"priority": 2}, "0 (high) or 1 (low)"),
])
def test_a_spec_the_library_would_refuse_is_an_error_that_says_what_to_use(kwargs, says):
    with pytest.raises(ShimError, match=says.replace("^", r"\^").replace("(", r"\(")
                       .replace(")", r"\)")):
        RegionSpec(**{"device_uuids": (GPU_A,), "limits": (1,), **kwargs})


def test_a_region_of_an_older_library_records_no_priority():
    data = bytearray(RegionSpec((GPU_A,), (1 << 30,), priority=1).encode())
    struct.pack_into("<I", data, 68, 1)  # flags: the uuid list only, as before priorities
    assert Region.parse(bytes(data), path=Path("r")).priority is None


def test_the_agent_mounts_the_region_where_the_library_looks_for_it():
    header = (Path(__file__).resolve().parents[3] / "native/src/config.h").read_text()
    assert f'#define GS_AGENT_REGION "{AGENT_REGION}"' in header, "shim.AGENT_REGION mirrors it"
    assert f'#define GS_AGENT_BOARD "{AGENT_BOARD}"' in header, "shim.AGENT_BOARD mirrors it"
    assert f"{NodeConfig().container_region_dir}/region" == AGENT_REGION, (
        "the default containerRegionDir puts the region at the library's fixed path")
