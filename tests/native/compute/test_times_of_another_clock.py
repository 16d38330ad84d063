"""budget.c and board.c (unchanged C, through the simulator library) with stamps written on another
clock: a budget `tat_ns` or a board heartbeat far ahead of `now` (a file that outlived a reboot,
a restored checkpoint) reads as "no debt" / "no demand", while the real debt this clock can owe
(up to 10 s) is still paid. The end-to-end twins: test_stale_clock_never_hangs.py."""

from __future__ import annotations

import ctypes
import struct

import pytest

S = 10**9
NOW = 5000 * S  # this clock: 5000 s since boot
FAR = NOW + 10**6 * S  # another boot's clock, a million seconds ahead
PCT = 30
BOARD_SIZE, SLOT, CLIENT = 64 + 64 * 64, 64, 256  # board.h (the client struct is < 256 bytes)


class Others(ctypes.Structure):  # struct gs_meter_others (meter.h), returned by value
    _fields_ = [
        *[(n, ctypes.c_int) for n in ("high", "low", "peers")],
        *[(n, ctypes.c_uint64) for n in ("busy_ns", "peers_busy_ns")],
        ("peers_inflight_ns", ctypes.c_int64),
    ]


@pytest.fixture(scope="module")
def c(sim):
    lib = sim.lib()
    lib.gs_budget_wait_ns.restype = ctypes.c_int64
    lib.gs_budget_wait_ns.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.gs_budget_debit.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int]  # fmt: skip
    lib.gs_board_client_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                         ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_int, ctypes.c_int]  # fmt: skip
    lib.gs_board_tick.restype = Others
    lib.gs_board_tick.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]
    return lib


def _device(tat: int) -> ctypes.Array:
    block = ctypes.create_string_buffer(256)  # struct gs_compute_device, tat_ns at 0
    struct.pack_into("<Q", block, 0, tat)
    return block


def test_a_tat_far_ahead_of_this_clock_is_a_full_bucket(c) -> None:
    assert c.gs_budget_wait_ns(_device(FAR), PCT, NOW, 0) == 0, "another clock's tat: no wait"


def test_a_debt_this_clock_can_owe_is_still_paid(c) -> None:
    wait = c.gs_budget_wait_ns(_device(NOW + 8 * S), PCT, NOW, 0)
    assert wait == 8 * S, f"8 s of debt (below the 10 s cap) is waited out, got {wait} ns"


def test_a_debit_replaces_a_stale_tat_with_one_of_this_clock(c) -> None:
    block = _device(FAR)
    c.gs_budget_debit(block, PCT, NOW, 3 * 10**6, 0)  # 3 ms of GPU at 30 % = 10 ms of wall
    tat = struct.unpack_from("<Q", block, 0)[0]
    assert NOW - 50 * 10**6 < tat <= NOW + 10 * 10**6, f"tat {tat - NOW} ns from now"


def _board_with_slot(beat: int) -> ctypes.Array:
    board = ctypes.create_string_buffer(BOARD_SIZE)
    struct.pack_into("<8sII", board, 0, b"GSBOARD1", 1, 64)
    struct.pack_into("<QQQI", board, 64 + 5 * SLOT, 0xDEAD, 0xBEEF, beat, 0)  # another tenant
    return board


def test_a_heartbeat_from_another_clock_is_no_demand_and_its_slot_can_be_taken(c) -> None:
    board = _board_with_slot(FAR)
    client = ctypes.create_string_buffer(CLIENT)
    c.gs_board_client_init(client, board, 0x1234, 0x42, 0, PCT, 1, 1)
    others = c.gs_board_tick(client, NOW, 0)
    assert (others.high, others.low) == (0, 0), "no tenant with work"
    board_full = _board_with_slot(FAR)
    for i in range(64):  # every slot owned, only the stale-clock one can be taken over
        if i != 5:
            struct.pack_into("<QQQ", board_full, 64 + i * SLOT, 0x100 + i, 0x42, NOW)
    c.gs_board_client_init(client, board_full, 0x1234, 0x42, 0, PCT, 1, 1)
    c.gs_board_tick(client, NOW, 0)
    owner = struct.unpack_from("<Q", board_full, 64 + 5 * SLOT)[0]
    assert owner == 0x1234, "the slot whose heartbeat lies in the future was taken over"


def test_a_fresh_heartbeat_of_this_clock_still_counts_as_demand(c) -> None:
    client = ctypes.create_string_buffer(CLIENT)
    c.gs_board_client_init(client, _board_with_slot(NOW - 10**6), 0x1234, 0x42, 0, PCT, 1, 1)
    others = c.gs_board_tick(client, NOW, 0)
    assert others.high == 1, "a high-priority tenant beat 1 ms ago: it has work"
