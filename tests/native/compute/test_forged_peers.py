"""Processes of one container admit against their summed in-flight work, read from the board —
which every tenant on the node can write. A slot forged with this container's tenant id (the
board shows it) and an absurd in-flight estimate must cost at most half the bucket: a smaller
burst, never a lower rate, never a stalled launch. meter.c and board.c (unchanged C, through
the simulator library) on a fake clock."""

from __future__ import annotations

import ctypes
import struct

import pytest
from test_times_of_another_clock import BOARD_SIZE, CLIENT, NOW, SLOT, Others

MS = 10**6
PCT = 30
TENANT = 0x42
WINDOW_NS = 50 * MS  # budget.h: the bucket holds 50 ms of wall time
QUANTUM_NS = MS // 2  # meter.h: a held-back launch waits for 0.5 ms more of GPU time


@pytest.fixture(scope="module")
def c(sim):
    lib = sim.lib()
    lib.gs_board_client_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                         ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_int, ctypes.c_int]  # fmt: skip
    lib.gs_board_tick.restype = Others
    lib.gs_board_tick.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]
    lib.gs_meter_init.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int]
    lib.gs_meter_set_others.argtypes = [ctypes.c_void_p, Others]
    lib.gs_meter_admit.restype = ctypes.c_int64
    lib.gs_meter_admit.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gs_sim_sizes.restype = ctypes.c_int64
    return lib


def _peer_view(c, inflight_ns: int) -> Others:
    """What the board shows a process of tenant TENANT when a slot of the same tenant id
    (another owner, fresh heartbeat) publishes `inflight_ns`."""
    board = ctypes.create_string_buffer(BOARD_SIZE)
    struct.pack_into("<8sII", board, 0, b"GSBOARD1", 1, 64)
    at = 64 + 3 * SLOT
    struct.pack_into("<QQQ", board, at, 0xBAD, TENANT, NOW - MS)  # owner, tenant, heartbeat
    struct.pack_into("<q", board, at + 48, inflight_ns)
    client = ctypes.create_string_buffer(CLIENT)
    c.gs_board_client_init(client, board, 0x1234, TENANT, 0, PCT, 0, 1)
    return c.gs_board_tick(client, NOW, 0)


def _admit_wait(c, others: Others, tat: int) -> int:
    """ns a launch of a fresh meter waits, on a bucket whose tat is `tat`."""
    dev = ctypes.create_string_buffer(256)  # struct gs_compute_device, tat_ns at 0
    struct.pack_into("<Q", dev, 0, tat)
    meter = ctypes.create_string_buffer(c.gs_sim_sizes(3))
    c.gs_meter_init(meter, None, None, dev, None, PCT)
    c.gs_meter_set_others(meter, others)
    return c.gs_meter_admit(meter, NOW)


def test_a_peers_in_flight_work_is_owed_by_the_whole_container(c) -> None:
    view = _peer_view(c, 1 * MS)
    assert view.peers == 1 and view.peers_inflight_ns == 1 * MS, "a process of this container"
    empty = NOW  # bucket just emptied: GPU work is waited out at 100/30 of its length
    assert _admit_wait(c, _peer_view(c, 0), empty) == 0, "nothing in flight: launch"
    wait = _admit_wait(c, view, empty)
    assert wait == (1 * MS + QUANTUM_NS) * 100 // PCT, f"the peer's 1 ms: waited {wait} ns"


def test_a_forged_peer_costs_at_most_half_the_bucket_and_never_stalls_a_launch(c) -> None:
    forged = _peer_view(c, 10**15)  # "11 days of GPU work in flight"
    assert _admit_wait(c, forged, 0) == 0, "a full bucket still admits at once"
    wait = _admit_wait(c, forged, NOW)
    half_bucket = WINDOW_NS * PCT // 100 // 2
    assert wait == (half_bucket + QUANTUM_NS) * 100 // PCT, f"waited {wait / MS:.1f} ms"
